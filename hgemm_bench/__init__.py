"""hgemm_bench: the benchmark behind `python bench.py`.

Modules, in the order a run uses them:
    cli        flags -> Settings (shapes, groups, budgets); no GPU, no runtime import
    selection  registry entries -> Cases (kernel + variant), groups derived from each entry's `.ladder`
    devinfo    the device: datasheet roofs (fp16 tensor, fp32, HBM), header, clocks; SM clock and board
               power sampled while something runs (NVML)
    measure    the GPU part: inputs, the float64 reference, correctness, event timing
    steady     the steady-state protocol (--steady): warm-up, interleaved rounds, clock and power
    analysis   pure functions over recorded measurements: error bounds, ratios (per round too),
               best rows, geomeans, the ladder table's rows
    tables     text tables (per shape, summary, top-k)
    plot       the images (--plot, --plots): TFLOPS against the shape, roofline, a bar chart per
               ladder; for --matmul files a roofline and the x-cuBLAS heatmap
    results    JSON / CSV writers, the JSON schema check, loading (kernel bench and --matmul files)
    outputs    every path a run writes checked before the first measurement; files written whole
    readme     the README results section (ladder table + images) from a results JSON
    progress   the stderr progress bar

`python bench.py --matmul [SECTIONS]` measures the public hgemm_rt.matmul instead:
    matmul_table    its sections as data: rows (shapes, host calls), baseline, target (no GPU)
    matmul_section  the measuring: against cuBLAS and torch.matmul, host cost per call; its JSON

`python bench.py --profile [JSON]` runs Nsight Compute over every rung; `--ladder-doc JSON` renders
docs/ladder.md from its JSON and docs/ladder_notes.toml (no GPU):
    ncu         finding ncu, its command line, its raw-page CSV parsed into base units (no GPU)
    counters    the metrics collected and the counters derived from them; comparing two rungs
    profile     the batches (one ncu process per ladder), the launcher ncu profiles, the JSON
    ladder_doc  the notes checked against the counters, the markdown and its roofline figure

`python scripts/sanitize.py` runs compute-sanitizer over every kernel:
    sanitize        the driver: one sanitizer process per tool and part, the child that launches and
                    checks, the summary of each log
    kernel_checks   the catalogue kernels' checks: operands, cuBLAS baselines, one checked launch
                    against float64 (hgemm_rt.numerics), the shapes each kernel is checked at
    matmul_checks     the matmul helper kernels' checks: the plans that launch each one at an aligned
                    and a ragged shape, run on operands whose gaps are never written
                    (the GPU tests share both)

Everything after `measure` works on plain dicts loaded from JSON, so it is tested on the CPU with a
recorded GPU run (tests/data/).
"""
