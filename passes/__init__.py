"""Transformations and lowerings. Each pass lives in its own module and is
registered here by name; its module is imported only when it is used."""

from fusecc.compiler.pass_manager import register_pass

# name -> "module:Class"
for _name, _target in {
    "canonicalize": "fusecc.passes.transforms.canonicalize:Canonicalize",
    "cse": "fusecc.passes.transforms.cse:CSE",
    "dce": "fusecc.passes.transforms.dce:DCE",
    "decompose": "fusecc.passes.transforms.decompose:Decompose",
    "inline": "fusecc.passes.transforms.inline:Inline",
    "tile": "fusecc.passes.tiling.tile:Tile",
    "lower-to-loops": "fusecc.passes.lowering.driver:LowerToLoops",
    "plan-memory": "fusecc.passes.memory.plan:PlanMemory",
    "share-kernels": "fusecc.passes.lowering.share_kernels:ShareKernels",
    "legalize": "fusecc.passes.backends.legalize:Legalize",
    "place-barriers": "fusecc.passes.lowering.barriers:PlaceBarriers",
    "fuse": "fusecc.passes.fusion.fuse:Fuse",
    # test-only passes (mlir-opt's convention): hidden from --list-passes, never in a default pipeline
    "test-inject-fault": "fusecc.passes.transforms.inject_fault:InjectFault",
}.items():
    register_pass(_name, _target)
