"""N-layer encoders built from examples/encoder_block.ir, for benchmarks and tests.

    python benchmarks/encoder_layers.py 6 -o enc6.ir                 # weights as arguments
    python benchmarks/encoder_layers.py 3 -o enc3.ir --resources     # weights in enc3.safetensors

Layer i's values are renamed `%l<i>_...`; its `%x` is the previous
layer's output, `%mask` is shared. Weights are either function arguments
(`%l<i>_wq`) or `dense_resource` constants read from a safetensors file
beside the module (seeded random values, scaled like trained weights).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np

BLOCK = Path(__file__).resolve().parent.parent / "examples" / "encoder_block.ir"
_ARG = re.compile(r"%(\w+): (tensor<[^>]*>)")
_NAME = re.compile(r"%([A-Za-z_][A-Za-z0-9_]*)")


def _block_parts() -> tuple[list[tuple[str, str]], list[str], str]:
    """(arguments as (name, type), body lines without the return, result type)."""
    text = "\n".join(line for line in BLOCK.read_text().splitlines() if not line.lstrip().startswith("//"))
    header, _, rest = text.partition(") -> ")
    result_type, _, body = rest.partition(" {")
    lines = [line for line in body.splitlines() if line.strip() and line.strip() != "}"]
    returned = next(line for line in lines if "func.return" in line)
    lines.remove(returned)
    return _ARG.findall(header), lines, result_type.strip()


def _shape(type_text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in type_text[len("tensor<") : -1].split("x")[:-1])


def encoder(layers: int, resources: str | None = None, seed: int = 0) -> tuple[str, dict[str, np.ndarray]]:
    """The text of an `layers`-layer encoder and its weights by name.

    With `resources` (a file name), weights are `dense_resource` constants
    read from that file, which the caller writes (`write_weights`);
    otherwise they are arguments after %x and %mask.
    """
    args, body, result_type = _block_parts()
    weights = [(name, t) for name, t in args if name not in ("x", "mask")]
    rng = np.random.default_rng(seed)
    values: dict[str, np.ndarray] = {}
    signature = [f"%x: {dict(args)['x']}", f"%mask: {dict(args)['mask']}"]
    lines: list[str] = []
    previous = "x"
    for layer in range(layers):
        prefix = f"l{layer}_"
        for name, t in weights:
            shape = _shape(t)
            if name.startswith("ln") and name.endswith("gamma"):
                array = 1.0 + 0.05 * rng.standard_normal(shape)
            else:
                array = rng.standard_normal(shape) / np.sqrt(shape[0]) if len(shape) == 2 else 0.02 * rng.standard_normal(shape)
            values[prefix + name] = array.astype(np.float32)
            if resources is None:
                signature.append(f"%{prefix}{name}: {t}")
            else:
                lines.append(f"  %{prefix}{name} = tensor.constant {{value = dense_resource<{prefix}{name}> : {t}}} : () -> {t}")

        def rename(match, prefix=prefix, previous=previous):
            name = match.group(1)
            if name == "x":
                return f"%{previous}"
            if name == "mask":
                return "%mask"
            return f"%{prefix}{name}"

        lines += [_NAME.sub(rename, line) for line in body]
        previous = f"{prefix}y"
    lines.append(f"  func.return %{previous} : {result_type}")
    func = f"func.func @encoder({', '.join(signature)}) -> {result_type} {{\n" + "\n".join(lines) + "\n}\n"
    if resources is None:
        return func, values
    indented = "\n".join("  " + line if line else line for line in func.splitlines())
    return f'module attributes {{fusecc.resources = "{resources}"}} {{\n{indented}\n}}\n', values


def write_encoder(layers: int, path: str | Path, resources: bool = False, seed: int = 0) -> dict[str, np.ndarray]:
    """Write the encoder to `path` (and with `resources`, its weights beside
    it as `<stem>.safetensors`); returns the weights."""
    path = Path(path)
    blob = path.with_suffix(".safetensors").name if resources else None
    text, values = encoder(layers, blob, seed)
    path.write_text(text)
    if resources:
        import safetensors.numpy

        safetensors.numpy.save_file(values, str(path.with_suffix(".safetensors")))
    return values


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("layers", type=int)
    p.add_argument("-o", dest="output", required=True)
    p.add_argument("--resources", action="store_true", help="weights as dense_resource constants in <output>.safetensors")
    args = p.parse_args()
    write_encoder(args.layers, args.output, args.resources)


if __name__ == "__main__":
    main()
