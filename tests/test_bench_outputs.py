"""bench.py's outputs and flags on the CPU: every path a run will write is checked before the first
measurement (rc 2 and the reason), results are rewritten whole after every shape (kernel bench) or
section (--matmul) so that an interrupted run keeps what it measured, and the flags that would make a
run measure nothing or something else than asked (--budget nan, a --kernels pattern matching no kernel)
are refused."""
from __future__ import annotations

import copy
import json
import os
import stat
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hgemm_bench import cli, outputs, results  # noqa: E402
from hgemm_bench import main as bench  # noqa: E402
from hgemm_bench.selection import pattern_problem, select  # noqa: E402

RECORDED = ROOT / "tests" / "data" / "bench_h200_all_4096_8192.json"


@pytest.fixture
def no_gpu_work(monkeypatch):
    """Fail the test if the run gets as far as the build or the GPU."""
    import hgemm_rt as hg

    def stop(*_a, **_k):
        raise AssertionError("the run went past the output checks")

    monkeypatch.setattr(hg, "gpu_available", stop)
    monkeypatch.setattr(bench, "load_registry", stop)


@pytest.fixture
def a_file(tmp_path):
    f = tmp_path / "plain_file"
    f.write_text("x")
    return f


@pytest.mark.parametrize("argv", [
    ["--json", "{bad}/r.json"], ["--csv", "{bad}/r.csv"], ["--plot", "{bad}/p.png"],
    ["--matmul", "host", "--json", "{bad}/m.json"], ["--plots", "tests/data/bench_h200_default.json", "--out", "{bad}"],
    ["--profile", "{bad}/prof.json"],
])
def test_an_output_under_a_folder_that_cannot_exist_is_refused_before_any_work(argv, a_file, no_gpu_work, capsys):
    argv = [a.format(bad=a_file / "sub") for a in argv]
    assert bench.main(argv) == 2
    err = capsys.readouterr().err
    flag = next(a for a in argv if a in ("--json", "--csv", "--plot", "--out", "--profile"))
    assert flag in err and "cannot write" in err and str(a_file) in err


def test_a_read_only_results_file_or_a_folder_in_its_place_is_refused(tmp_path, no_gpu_work, capsys):
    kept = tmp_path / "kept.json"
    kept.write_text("{}")
    kept.chmod(stat.S_IRUSR | stat.S_IRGRP)
    assert bench.main(["--json", str(kept)]) == 2
    assert "read-only" in capsys.readouterr().err and kept.read_text() == "{}"
    assert bench.main(["--csv", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_the_folders_of_the_outputs_are_created_before_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "load_registry", lambda: None)  # (stops the run right after the checks)
    out = tmp_path / "a" / "b"
    assert bench.main(["--json", str(out / "r.json"), "--csv", str(tmp_path / "c" / "r.csv")]) == 2
    assert out.is_dir() and (tmp_path / "c").is_dir()
    assert not list(out.iterdir())  # the write check leaves nothing behind


def test_a_results_file_is_replaced_whole_and_keeps_its_mode(tmp_path):
    path = tmp_path / "r.json"
    outputs.write_atomically(path, "one")
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~_umask()  # as open() would make it, not mkstemp's 0600
    path.chmod(0o640)
    outputs.write_atomically(path, "two")
    assert path.read_text() == "two" and stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0"])
def test_a_budget_that_is_not_a_positive_finite_number_is_refused(value, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(["--budget", value])
    assert exc.value.code == 2 and "--budget" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--steady", "--warm-s", "nan"], ["--seed", "-1"], ["--readme-shape", "0"]])
def test_other_numbers_the_run_cannot_use_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(argv)
    assert exc.value.code == 2 and argv[-2] in capsys.readouterr().err


# -- --kernels: a pattern that matches nothing is refused, not "cuBLAS alone, exit 0" ----------------

def entry(name, ladder, baseline=False):
    return SimpleNamespace(name=name, ladder=ladder, catalogue=ladder != "matmul", step=1, layout="NN", dtype="f16",
                           out="f16", variants={},
                           is_baseline=baseline, acc_for=lambda choice: "f32",
                           spec=None if baseline else SimpleNamespace(grid="tiles", tile=(128, 128, 32)))


ENTRIES = [entry("hgemm_mma_a", "mma"), entry("hgemm_wmma_b", "wmma"), entry("matmul_copy", "matmul"),
           entry("hgemm_cublas_tensor_op_nn", "cublas", baseline=True)]


def _problem(argv):
    s = cli.parse_args(argv)
    return pattern_problem(ENTRIES, s, select(ENTRIES, s))


def test_kernels_patterns_that_match_no_kernel_are_named():
    assert _problem(["--kernels", "mma_a"]) is None
    assert _problem([]) is None
    for argv, named in ((["--kernels", "nosuch"], "'nosuch'"), (["--kernels", "mma_a,nosuch*"], "'nosuch*'"),
                        (["--kernels", "cublas"], "'cublas'"),  # the baselines run anyway: not a kernel
                        (["--kernels", "matmul_copy"], "'matmul_copy'")):  # a matmul helper: not benchmarked
        got = _problem(argv)
        assert got and named in got and "no kernel" in got, (argv, got)
    assert "group flags keep none" in _problem(["--mma", "--kernels", "wmma"])


def test_a_kernels_pattern_that_matches_nothing_exits_2_before_the_gpu(monkeypatch, capsys):
    import hgemm_rt as hg

    monkeypatch.setattr(bench, "load_registry", lambda: SimpleNamespace(kernels=lambda: ENTRIES))
    monkeypatch.setattr(hg, "gpu_available", lambda: pytest.fail("reached the GPU"))
    assert bench.main(["--kernels", "nosuch", "--MNK", "256"]) == 2
    assert "'nosuch' matches no kernel" in capsys.readouterr().err


def test_a_profile_pattern_that_matches_nothing_exits_2(monkeypatch, tmp_path, capsys):
    import hgemm_rt as hg
    from hgemm_bench import ncu

    monkeypatch.setattr(ncu, "find_ncu", lambda: "/usr/bin/ncu")
    monkeypatch.setattr(hg, "gpu_available", lambda: True)
    monkeypatch.setattr(hg, "get_registry", lambda: SimpleNamespace(kernels=lambda: ENTRIES))
    assert bench.main(["--profile", str(tmp_path / "p.json"), "--kernels", "mma_a,nosuch", "--MNK", "256"]) == 2
    assert "'nosuch' matches no kernel" in capsys.readouterr().err


# -- results written as the run goes -----------------------------------------------------------------

def _fake_device(monkeypatch, device: dict):
    import hgemm_rt as hg
    import hgemm_rt.timing as timing
    from hgemm_bench import devinfo

    monkeypatch.setattr(hg, "get_device", lambda *a: SimpleNamespace(info=SimpleNamespace(cc=(9, 0), ordinal=0)))
    monkeypatch.setattr(timing, "L2Flusher", lambda *a: SimpleNamespace(close=lambda: None))
    monkeypatch.setattr(devinfo, "device_record", lambda dev: copy.deepcopy(device))
    monkeypatch.setattr(devinfo, "header_lines", lambda device, build: [])
    monkeypatch.setattr(devinfo, "clocks", lambda ordinal=0: {})


def test_an_interrupted_kernel_bench_keeps_the_shapes_it_measured(tmp_path, monkeypatch, capsys):
    from hgemm_bench import measure

    recorded = results.load(str(RECORDED))
    shapes = sorted({(m["M"], m["N"], m["K"]) for m in recorded["measurements"]})
    assert len(shapes) >= 2
    _fake_device(monkeypatch, recorded["device"])
    js, cs = tmp_path / "r.json", tmp_path / "r.csv"

    def measure_shape(shape, *_a, **_k):
        if shape == shapes[1]:  # by now the first shape is on disk
            on_disk = json.loads(js.read_text())
            assert on_disk["complete"] is False and {(m["M"], m["N"], m["K"]) for m in on_disk["measurements"]} \
                == {shapes[0]}
            assert len(cs.read_text().splitlines()) == 1 + len(on_disk["measurements"])
            raise KeyboardInterrupt
        rows = [copy.deepcopy(m) for m in recorded["measurements"] if (m["M"], m["N"], m["K"]) == shape]
        return rows, []

    monkeypatch.setattr(measure, "measure_shape", measure_shape)
    s = cli.parse_args(["--M", "1", "--N", "1", "--K", "1", "--json", str(js), "--csv", str(cs), "--no-progress"])
    s.shapes = shapes[:2]
    registry = SimpleNamespace(manifest=SimpleNamespace(build_hash=recorded["build"]["hash"], nvcc="12"))
    cases = [SimpleNamespace(entry=SimpleNamespace(is_baseline=False))]
    assert bench.run(s, registry, cases, []) == 130
    doc = results.load(str(js))  # a whole, valid results file
    assert doc["complete"] is False and {(m["M"], m["N"], m["K"]) for m in doc["measurements"]} == {shapes[0]}
    assert "interrupted" in capsys.readouterr().err


def test_an_interrupted_matmul_run_keeps_the_sections_it_finished(tmp_path, monkeypatch, capsys):
    import hgemm_rt as hg
    from hgemm_bench import matmul_section

    out = tmp_path / "mm.json"

    def run_sections(names, settings, build, command, steady=None, on_section=None):
        on_section(matmul_section.make_doc(device={"name": "fake"}, build=build, frameworks={}, settings={},
                                           command=command, rows=[{"section": names[0], "ok": True}], verdicts=[],
                                           skipped=[]))
        raise KeyboardInterrupt

    monkeypatch.setattr(hg, "gpu_available", lambda: True)
    monkeypatch.setattr(bench, "load_registry", lambda: SimpleNamespace(manifest=SimpleNamespace(build_hash="h",
                                                                                                  nvcc="12")))
    monkeypatch.setattr(matmul_section, "run_sections", run_sections)
    assert bench.main(["--matmul", "host,torch", "--json", str(out)]) == 130
    doc = results.load_any(str(out))
    assert [r["section"] for r in doc["rows"]] == ["host"]
    assert str(out) in capsys.readouterr().err


# -- the sanitizer's driver: the same rules for its --kernels and --log-dir ----------------------------

@pytest.fixture
def fake_build(monkeypatch):
    import hgemm_rt as hg

    kernels = {n: SimpleNamespace(name=n, ladder=ladder, catalogue=ladder != "matmul") for n, ladder in (("hgemm_mma_a", "mma"),
                                                                            ("matmul_copy2d_f16", "matmul"))}
    monkeypatch.setattr(hg, "get_registry", lambda: SimpleNamespace(manifest=SimpleNamespace(kernels=kernels)))


def test_the_sanitizer_refuses_a_pattern_of_its_list_that_matches_nothing(fake_build, tmp_path, capsys):
    from hgemm_bench import sanitize

    rc = sanitize.main(["--kernels", "hgemm_mma_a,nosuch_*", "--sanitizer", sys.executable, "--log-dir", str(tmp_path)])
    assert rc == 2 and "nosuch_*" in capsys.readouterr().err


def test_the_sanitizer_refuses_a_log_folder_it_cannot_write_before_starting(fake_build, a_file, capsys):
    from hgemm_bench import sanitize

    rc = sanitize.main(["--kernels", "hgemm_mma_a", "--sanitizer", sys.executable, "--log-dir", str(a_file / "logs")])
    assert rc == 2 and "--log-dir" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--timeout", "nan"], ["--timeout", "-5"], ["--jobs", "0"]])
def test_the_sanitizer_refuses_a_timeout_or_jobs_it_cannot_honour(argv, capsys):
    from hgemm_bench import sanitize

    with pytest.raises(SystemExit) as exc:
        sanitize.main(argv + ["--sanitizer", sys.executable])
    assert exc.value.code == 2 and argv[0] in capsys.readouterr().err
