// The dynamic shared memory of each kernel symbol, exported as data so that the build can hold it
// against the `dsmem` its cu/<family>.toml declares (one truth: build_kernels.py reads
// hg_dsmem__<symbol> back from the cubin's symbol table and refuses a family whose toml disagrees).
// A __constant__ int beside the kernel: data only (constant bank 3), never referenced by the kernel,
// so the kernel's SASS does not change. Variadic: template arguments carry commas.
#pragma once

#define HG_EXPORT_DSMEM(SYM, ...) extern "C" __constant__ int hg_dsmem__##SYM = (__VA_ARGS__);
