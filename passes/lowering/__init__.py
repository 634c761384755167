"""From fusion groups to the loop level.

  interface.py          the template contract (`@template(kind)`, LoweredGroup, ArgRef)
  scalar_emitter.py     group values per element as scalar IR
  scalar_formulas.py    what each elementwise op computes per element (`SCALAR_FORMULAS`)
  tiling.py             tile choices (`tile` pass, `tile.*` attributes, `choose_tiles`)
  kernel_builder.py     loop nests and the GPU/CPU kernel skeletons, parts
  elementwise.py        elementwise/injective parts
  reduction_analysis.py reductions and composites as stats in levels
  reduction_walkers.py  combining, and how a row is walked (GPU threads, CPU lanes)
  reduction_rows.py     row kernels and split rows
  reduction.py          staged fallback; the template of elementwise, injective,
                        reduction and opaque groups
  horizontal.py         independent parts in one kernel
  matmul.py, attention.py  (their own authors) matmul and attention templates
  driver.py             `lower-to-loops`: kernels and one host schedule per function
  memory_plan.py        `plan-memory`: liveness, best fit, in place
  memory_check.py       an independent proof that a plan is sound
"""
