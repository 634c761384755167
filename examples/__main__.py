"""python -m fusecc.examples: print where the examples are, and list them."""

from fusecc.examples import FOLDER, programs

print(FOLDER)
for program in programs():
    print(f"  {program.name}")
print(f"  host/ (launch.py, launch.cpp: run kernels.cu + kernels.json on a GPU)")
