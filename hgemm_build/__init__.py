"""Build-side helpers for build_kernels.py: the kernel catalogue (cu/*.toml) and the nvcc toolchain."""
