# cffi_modules has no pyproject.toml key yet; this file exists to pass it, and to build the
# GPU library at install time where nvcc is (cxlbench/gpu_build.py; never fails the install).
import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent


class BuildExtAndGpu(build_ext):
    def run(self):
        super().run()
        spec = importlib.util.spec_from_file_location("cxb_gpu_build",
                                                      HERE / "cxlbench" / "gpu_build.py")
        gpu_build = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(gpu_build)
        package = HERE / "cxlbench" if self.inplace else Path(self.build_lib) / "cxlbench"
        gpu_build.at_install(HERE / "native" / "gpu", package,
                             say=lambda line: self.announce(line, level=2))


setup(cffi_modules=["native/build.py:ffibuilder"], cmdclass={"build_ext": BuildExtAndGpu})
