"""A resumed run keeps its text and its settings (train/resuming.py), and says which it was allowed to change;
the programs' flags are written whole, with a suggestion for a misspelt one; a run's closing figures are its
last row's."""
import json
import os

import pytest

from tinygrad_gpu.data import DataError
from tinygrad_gpu.train import TrainConfig, parse_args, train
from tinygrad_gpu.train import checkpointing, config as config_module, loop
from tinygrad_gpu.train.config import CHANGEABLE_ON_RESUME, CHOSEN_EACH_TIME, KEPT_ON_RESUME, ConfigError

TEXT = "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs! " * 60
TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--batch-size", "4",
        "--eval-iters", "2", "--eval-interval", "5", "--num-samples", "0", "--no-progress", "--warmup-iters", "2",
        "--device", "cpu"]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT)
    return str(path)


def _train(*flags, defaults=None):
    return train(parse_args([*TINY, *flags], defaults=defaults), log=lambda *a: None)


def _rows(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def _recorded(out):
    return checkpointing.read(os.path.join(out, checkpointing.CHECKPOINT_NAME))


def test_every_flag_is_kept_changeable_or_the_run_s_own_on_resume():
    """A new flag must say what --resume does with it: a setting kept from the run, one that may change, the
    architecture (the checkpoint's), or one about the run itself."""
    runs_own = {"data", "init_from", "out_dir", "resume", "overwrite", "allow_data_change", "allow_setting_change"}
    groups = [set(KEPT_ON_RESUME), set(CHANGEABLE_ON_RESUME), set(CHOSEN_EACH_TIME), set(TrainConfig.MODEL_FIELDS),
              runs_own]
    assert sum(len(g) for g in groups) == len(set().union(*groups)), "a flag in two groups"
    assert set().union(*groups) == set(TrainConfig().flags())


def test_a_resumed_run_keeps_its_text_and_settings(tmp_path, corpus, monkeypatch):
    out = str(tmp_path / "out")
    _train("--data", corpus, "--out-dir", out, "--max-iters", "5", "--lr", "3e-3", "--weight-decay", "0.2")
    monkeypatch.chdir(tmp_path.parent)             # another folder: the text is found by its absolute path
    summary = _train("--out-dir", out, "--resume", "--max-iters", "10")
    saved = _recorded(out)
    assert saved["config"]["lr"] == 3e-3 and saved["config"]["weight_decay"] == 0.2      # not the defaults
    assert saved["config"]["data"] == os.path.abspath(corpus) and saved["data"]["source"] == os.path.abspath(corpus)
    assert summary["iter"] == 10 and "changed" not in summary["metrics"][-1]


def test_a_resumed_run_keeps_its_accumulation_and_its_length(tmp_path, corpus):
    out = str(tmp_path / "out")
    _train("--data", corpus, "--out-dir", out, "--max-iters", "5", "--gradient-accumulation-steps", "2")
    summary = _train("--out-dir", out, "--resume", "--max-iters", "10")
    assert summary["tokens"] == 10 * 2 * 4 * 16                     # 2 micro-batches of 4 windows of 16, each step
    rows = _rows(out)
    assert [r["iter"] for r in rows] == [0, 5, 10] and rows[2]["flops"] == 2 * rows[1]["flops"]
    again = _train("--out-dir", out, "--resume")                      # no --max-iters: the run's 10, not 1000
    assert again["iter"] == 10 and _recorded(out)["config"]["max_iters"] == 10


def test_a_changed_setting_is_refused_unless_allowed_and_then_recorded(tmp_path, corpus):
    out = str(tmp_path / "out")
    _train("--data", corpus, "--out-dir", out, "--max-iters", "5", "--lr", "3e-3")
    with pytest.raises(ConfigError, match=r"--lr 0\.001 \(the run's: --lr 0\.003\).*--allow-setting-change"):
        _train("--out-dir", out, "--resume", "--max-iters", "10", "--lr", "1e-3")
    assert _recorded(out)["iter"] == 5                                    # nothing was trained
    _train("--out-dir", out, "--resume", "--max-iters", "10", "--lr", "1e-3", "--allow-setting-change")
    rows = [r for r in _rows(out) if "changed" in r]
    assert [r["changed"] for r in rows] == [{"lr": [3e-3, 1e-3]}] and rows[0]["iter"] == 10
    assert _recorded(out)["config"]["lr"] == 1e-3                        # from here on, the new value


def test_another_text_is_refused_unless_allowed(tmp_path, corpus):
    out, other = str(tmp_path / "out"), tmp_path / "other.txt"
    other.write_text(TEXT.upper())
    _train("--data", corpus, "--out-dir", out, "--max-iters", "5")
    with pytest.raises(DataError, match=r"--data .*other\.txt is not the text the run in .* trained on .*corpus"):
        _train("--out-dir", out, "--resume", "--max-iters", "10", "--data", str(other))
    copy = tmp_path / "moved.txt"                  # the same text elsewhere is the same text
    copy.write_text(TEXT)
    _train("--out-dir", out, "--resume", "--max-iters", "6", "--data", str(copy))
    with open(copy, "a") as f:                     # the run's file (the one it went on with), edited since
        f.write("more")
    with pytest.raises(DataError, match="the run's text has changed since its checkpoint was saved"):
        _train("--out-dir", out, "--resume", "--max-iters", "10")
    _train("--out-dir", out, "--resume", "--max-iters", "10", "--allow-data-change")
    [row] = [r for r in _rows(out) if "changed" in r]
    old, new = row["changed"]["data"]
    assert old["source"] == new["source"] == str(copy) and old["sha256"] != new["sha256"]
    # a text with characters the vocabulary lacks: --drop-unknown goes with --allow-data-change, in one go
    _train("--out-dir", out, "--resume", "--max-iters", "15", "--data", str(other), "--allow-data-change",
           "--drop-unknown")
    assert set(_rows(out)[-1]["changed"]) == {"data", "drop_unknown"}


def test_an_allowed_change_interrupted_before_its_row_is_recorded_by_the_next(tmp_path, corpus, monkeypatch):
    """The checkpoint an interrupted run saves keeps a change no row has recorded yet."""
    out = str(tmp_path / "out")
    _train("--data", corpus, "--out-dir", out, "--max-iters", "5", "--lr", "3e-3")

    class StopAtOnce:                               # Ctrl-C before the first step
        requested = True

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    with monkeypatch.context() as patch:
        patch.setattr(loop, "_StopRequest", StopAtOnce)
        stopped = _train("--out-dir", out, "--resume", "--max-iters", "10", "--lr", "1e-3", "--allow-setting-change")
    assert stopped["interrupted"] and not any("changed" in r for r in _rows(out))
    assert _recorded(out)["changes"] == {"lr": [3e-3, 1e-3]}
    _train("--out-dir", out, "--resume", "--max-iters", "10")
    assert [r["changed"] for r in _rows(out) if "changed" in r] == [{"lr": [3e-3, 1e-3]}]
    assert "changes" not in _recorded(out)


def test_a_fine_tuning_program_s_run_resumes(tmp_path, corpus):
    """finetune_charlm.py's defaults name the checkpoint it starts from; its own run resumes from its own."""
    base, tuned = str(tmp_path / "base"), str(tmp_path / "tuned")
    _train("--data", corpus, "--out-dir", base, "--max-iters", "5")
    defaults = TrainConfig(init_from=os.path.join(base, checkpointing.CHECKPOINT_NAME), lr=3e-4)
    _train("--data", corpus, "--out-dir", tuned, "--max-iters", "5", defaults=defaults)
    assert _train("--out-dir", tuned, "--resume", "--max-iters", "10", defaults=defaults)["iter"] == 10
    assert _recorded(tuned)["config"]["lr"] == 3e-4


def test_allow_flags_need_resume():
    with pytest.raises(ConfigError, match="--allow-data-change applies to --resume"):
        config_module.validate(parse_args(["--allow-data-change"]))


@pytest.mark.parametrize("typed, meant", [("--max-iter", "--max-iters"), ("--n-layers", "--n-layer"),
                                          ("--colour", None)])
def test_a_misspelt_flag_is_an_error_with_a_suggestion(capsys, typed, meant):
    with pytest.raises(SystemExit) as stop:
        parse_args([typed, "3"])
    assert stop.value.code == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"error: unrecognized arguments: {typed} 3"), line
    assert (f"did you mean {meant}?" in line) if meant else "did you mean" not in line, line     # no wild guesses


def test_the_closing_figures_are_the_last_row_s(tmp_path, corpus):
    summary = _train("--data", corpus, "--out-dir", str(tmp_path / "out"), "--max-iters", "10")
    last = summary["metrics"][-1]
    assert last["iter"] == 10 and last["tokens_per_sec"] > 0
    for key in ("tokens_per_sec", "tflops_per_sec", "mfu", "elapsed_s", "flops"):
        assert summary[key] == last[key], key
