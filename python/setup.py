"""The recorder's C module, commdebug._speedups (light mode's module hooks,
the full recorder's per-op path and module calls, the trace writer's
formatting): built where a compiler and the Python
headers are there; where not, the build goes on without it and the
recorder runs the Python it stands for (the metadata is pyproject.toml's)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("commdebug._speedups",
                                 ["commdebug/_speedups.c", "commdebug/_speedups_mode.c",
                                  "commdebug/_speedups_full.c", "commdebug/_speedups_lines.c",
                                  "commdebug/_speedups_io.c"],
                                 depends=["commdebug/_speedups.h"], optional=True)])
