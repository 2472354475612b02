"""The kernel build: `hgemm_build.cli:main` (`python build_kernels.py`) compiles the families
declared in cu/*.toml (catalog) with nvcc (toolchain) as cached, checked jobs (jobs, cubin) and publishes
them into artifacts/ and its manifest (publish)."""
