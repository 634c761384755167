"""Front ends: readers of foreign model formats that build tensor-dialect modules.

A front end imports only `fusecc.dialects` and `fusecc.compiler`; the driver
picks one by file extension (`fusecc.driver.frontend`).
"""
