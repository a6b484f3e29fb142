"""The recorder's C module, commdebug._speedups (light mode's module hooks,
the full recorder's per-op path and module calls, the trace writer's
formatting): built where a compiler and the Python
headers are there; where not, the build goes on without it and the
recorder runs the Python it stands for (the metadata is pyproject.toml's).

Light mode's C++ gradient hook, commdebug._gradhook, is built too where torch
is importable at build time (its headers ship with it; `pip install
--no-build-isolation .` in the job's environment) and a C++20 compiler is
there.  It must match the torch it runs with: the recorder loads it only
for the torch version it was built against, and puts its hooks through
torch's Python API otherwise."""

from setuptools import Extension, setup


def gradhook():
    """commdebug._gradhook's extension, where torch is importable here."""
    try:
        import torch
        from torch.utils.cpp_extension import include_paths, library_paths
    except Exception:
        return []
    return [Extension("commdebug._gradhook", ["commdebug/_gradhook.cpp", "commdebug/_collkernel.cpp"],
                      depends=["commdebug/_gradhook.h"], language="c++",
                      include_dirs=include_paths(), library_dirs=library_paths(),
                      libraries=["torch_python", "torch_cpu", "c10"],
                      define_macros=[("CD_TORCH_VERSION", '"%s"' % torch.__version__)],
                      extra_compile_args=["-std=c++20"], optional=True)]


setup(ext_modules=[Extension("commdebug._speedups",
                                 ["commdebug/_speedups.c", "commdebug/_speedups_mode.c",
                                  "commdebug/_speedups_full.c", "commdebug/_speedups_lines.c",
                                  "commdebug/_speedups_io.c"],
                                 depends=["commdebug/_speedups.h", "commdebug/_gradhook.h"],
                                 optional=True)] + gradhook())
