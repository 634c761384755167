"""Transformations and lowerings. Each pass lives in its own module and is
registered here by name; its module is imported only when it is used."""

from fusecc.compiler.pass_manager import register_pass

# name -> "module:Class"
for _name, _target in {
}.items():
    register_pass(_name, _target)
