"""fusecc.tools"""
