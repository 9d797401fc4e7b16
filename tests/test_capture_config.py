"""CaptureConfig.validate(): every bad field named, all problems reported at once."""

from __future__ import annotations

import pickle

import pytest

from traceattr.capture import CaptureConfig, CaptureConfigError


def problems_of(**fields) -> list[str]:
    with pytest.raises(CaptureConfigError) as info:
        CaptureConfig(**fields).validate()
    return info.value.problems


def test_a_good_config_validates_and_is_returned(tmp_path):
    cfg = CaptureConfig(out_dir=str(tmp_path / "run"), ranks=[0, 1], wait=1, warmup=1, active=2, repeat=2)
    assert cfg.validate() is cfg
    assert (tmp_path / "run").is_dir()       # created, and proven writable
    assert pickle.loads(pickle.dumps(cfg)) == cfg


@pytest.mark.parametrize("field, value, words", [
    ("wait", -1, ">= 0"), ("warmup", None, "must be set"), ("skip_first", 1.5, "integer"),
    ("active", 0, ">= 1"), ("repeat", True, "integer"), ("max_windows", 0, ">= 1"),
    ("ranks", None, "must be set"), ("ranks", [], "empty list"), ("ranks", [0, -2], ">= 0"),
    ("ranks", "some", "'all'"), ("activities", ["cpu", "gpu"], "unknown"), ("activities", None, "must be set"),
    ("with_stack", "yes", "true or false"), ("compress", None, "true or false"),
    ("flush_timeout_s", 0, "> 0"), ("out_dir", None, "must be set"), ("out_dir", "s3://bucket/x", "local folder"),
])
def test_each_bad_field_is_named(tmp_path, field, value, words):
    fields = {"out_dir": str(tmp_path), field: value}
    problems = problems_of(**fields)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{field}:") and words in problems[0]


def test_activity_this_build_cannot_record(tmp_path):
    import torch.profiler

    if torch.profiler.ProfilerActivity.CUDA in torch.profiler.supported_activities():
        pytest.skip("this torch build records CUDA")
    [problem] = problems_of(out_dir=str(tmp_path), activities=["cpu", "cuda"])
    assert problem.startswith("activities:") and "cannot record" in problem and "cuda" in problem


def test_memory_snapshot_needs_cuda(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    [problem] = problems_of(out_dir=str(tmp_path), memory_snapshot=True)
    assert problem.startswith("memory_snapshot:")


def test_out_dir_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    [problem] = problems_of(out_dir=str(blocker / "run"))
    assert problem.startswith("out_dir:") and "cannot create" in problem


def test_several_bad_fields_reported_at_once(tmp_path):
    problems = problems_of(out_dir=None, wait=-1, active=0, ranks=[], activities=["tpu"], record_shapes=1)
    named = sorted(p.split(":")[0] for p in problems)
    assert named == ["active", "activities", "out_dir", "ranks", "record_shapes", "wait"]
    message = str(CaptureConfigError(problems))
    assert all(name in message for name in named)


def test_disabled_config_checks_nothing_else():
    assert CaptureConfig(enabled=False, out_dir=None, active=0).validate().enabled is False


def test_from_dict_like_yaml(tmp_path):
    cfg = CaptureConfig.from_dict({"out_dir": str(tmp_path), "ranks": [0, 1], "activities": ["cpu"],
                                   "wait": 0, "warmup": 1, "active": 2})
    assert cfg.ranks == (0, 1) and cfg.activities == ("cpu",) and cfg.validate() is cfg
    assert cfg.to_dict()["ranks"] == [0, 1]
    with pytest.raises(CaptureConfigError) as info:
        CaptureConfig.from_dict({"out_dir": str(tmp_path), "actve": 2, "shedule": {}})
    assert [p.split(":")[0] for p in info.value.problems] == ["actve", "shedule"]
    message = str(info.value)
    assert message.count("known fields:") == 1 and message.count("memory_snapshot_max_entries") == 1
    assert "actve: unknown field (did you mean active?)" in message
    with pytest.raises(CaptureConfigError) as info:      # the unknown field hid the bad value
        CaptureConfig.from_dict({"out_dir": str(tmp_path), "warmpu": 1, "active": -1, "ranks": [-2]})
    assert [p.split(":")[0] for p in info.value.problems] == ["warmpu", "active", "ranks"]


def test_from_dict_accepts_any_mapping(tmp_path):
    import types

    from omegaconf import OmegaConf

    plain = {"out_dir": str(tmp_path), "ranks": [0, 1], "activities": ["cpu"], "active": 2}
    expected = CaptureConfig.from_dict(plain)
    assert CaptureConfig.from_dict(types.MappingProxyType(plain)) == expected
    assert CaptureConfig.from_dict(OmegaConf.create(plain)) == expected       # Hydra's DictConfig
    assert CaptureConfig.from_dict(OmegaConf.create(plain)).ranks == (0, 1)   # ListConfig -> tuple
    with pytest.raises(CaptureConfigError, match="expected a mapping, got list"):
        CaptureConfig.from_dict([("out_dir", str(tmp_path))])


def test_run_name_template(tmp_path):
    cfg = CaptureConfig(out_dir=str(tmp_path), run_name="{time}-{config_hash}")
    resolved = cfg.resolve_run_name(now_s=0)
    assert resolved.out_dir == str(tmp_path / f"19700101-000000-{cfg.content_hash()}")
    assert resolved.run_name is None and resolved.resolve_run_name() == resolved
    for bad, words in (("{user}", "unknown placeholder"), ("a/{time}", "path separators"), ("", "non-empty"),
                       ("{time", "not a valid template")):
        [problem] = problems_of(out_dir=str(tmp_path), run_name=bad)
        assert problem.startswith("run_name:") and words in problem


def test_validate_can_leave_the_disk_alone(tmp_path):
    target = tmp_path / "not_yet"
    assert CaptureConfig(out_dir=str(target)).validate(probe_out_dir=False) and not target.exists()


def test_content_hash_depends_on_content_not_identity(tmp_path):
    a = CaptureConfig(out_dir=str(tmp_path), active=2)
    assert a.content_hash() == CaptureConfig(out_dir=str(tmp_path), active=2).content_hash()
    assert a.content_hash() != CaptureConfig(out_dir=str(tmp_path), active=3).content_hash()


@pytest.mark.parametrize("field, value, words", [
    ("active", 10**30, "at most 100_000"), ("active", 100_001, "at most 100_000"),
    ("warmup", 10**6, "at most 100_000"), ("wait", 10**10, "at most 1_000_000_000"),
    ("skip_first", 2**63, "at most 1_000_000_000"), ("repeat", 10**6, "at most 1_000"),
    ("max_windows", 1001, "at most 1_000"), ("memory_snapshot_max_entries", 10**8, "at most 10_000_000"),
    ("flush_timeout_s", float("inf"), "at most 86_400 seconds"), ("flush_timeout_s", 1e9, "at most 86_400"),
    ("ranks", [0, 2**40], "<= 16_777_215"),
    # str() of it raises past 4300 digits (so the id is given): no crash, the message gives its size
    pytest.param("active", 10**5000, "about 5001 digits", id="active-5001-digits"),
])
def test_absurd_schedule_values_are_refused_with_a_bound(tmp_path, field, value, words):
    """`active=10**30` was accepted: the profiler recorded until stop(), holding every event in memory."""
    [problem] = problems_of(out_dir=str(tmp_path), **{field: value})
    assert problem.startswith(f"{field}:") and words in problem and len(problem) < 200, problem


def test_the_bounds_themselves_are_accepted(tmp_path):
    cfg = CaptureConfig(out_dir=str(tmp_path), skip_first=10**9, wait=10**9, warmup=100_000, active=100_000,
                        repeat=1_000, max_windows=1_000, flush_timeout_s=86_400, ranks=[2**24 - 1])
    assert cfg.validate() is cfg


def test_a_path_with_a_nul_is_an_invalid_value(tmp_path):
    [problem] = problems_of(out_dir=str(tmp_path) + "/a\0b")
    assert problem.startswith("out_dir:") and "NUL" in problem
