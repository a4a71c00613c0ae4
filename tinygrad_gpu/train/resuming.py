"""What a resumed run keeps of the run it continues: its text and its settings.

A checkpoint records the settings the run was started with (TrainConfig.flags()) and the text it trained on
(data_record: the corpus's name or the file's absolute path, and the text's SHA-256). --resume continues with
them: a setting left off the command line takes the run's value, not the default (but for CHOSEN_EACH_TIME:
device, dtype, backend, progress), and --data left off reads the run's text again. A setting of KEPT_ON_RESUME
given with another value, or another text, is refused in one line that names both, unless the user says it is
deliberate (--allow-setting-change, --allow-data-change); the change then goes into the next metrics.jsonl row
("changed": {name: [old, new]}), and until that row is written the checkpoint keeps it. CHANGEABLE_ON_RESUME (how
long the run goes on, what it reports) may change freely; the architecture is the checkpoint's
(check_against_checkpoint). "Given" means TrainConfig.chosen(): the flags on the command line, or for a
TrainConfig made in code, the fields it sets to other than their defaults. A checkpoint from before the text's
record continues on the --data its settings name, unchecked.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os

from ..data import DataError, read_text
from .datasets import read_source
from .config import CHANGEABLE_ON_RESUME, KEPT_ON_RESUME, ConfigError, TrainConfig

NAMED_CORPORA = ("builtin", "shakespeare")


def data_record(name_or_path: str, text: str, template: str = None) -> dict:
    """What a run trains on, as its checkpoint keeps it: a named corpus's name or a file's absolute path (a
    resumed run may start in another folder), and the text's SHA-256; with a --template, of the text and the
    template together (an edited template makes other examples of the same records)."""
    source = name_or_path or "builtin"
    hashed = text if template is None else text + "\0" + read_text(template)
    return {"source": source if source in NAMED_CORPORA else os.path.abspath(source),
            "sha256": hashlib.sha256(hashed.encode("utf-8")).hexdigest()}


def kept_settings(config: TrainConfig, saved: dict) -> tuple:
    """(config with the run's settings where the command line gave none, the changes it gave {name: [old, new]},
    with those the run was allowed before and has not recorded yet). A change of KEPT_ON_RESUME without
    --allow-setting-change (--drop-unknown: or --allow-data-change) is a ConfigError naming old and new."""
    recorded = (saved or {}).get("config") if config.resume else None
    if not recorded:
        return config, {}
    given = config.chosen()
    changes = {name: [recorded[name], getattr(config, name)] for name in KEPT_ON_RESUME
               if name in recorded and name in given and getattr(config, name) != recorded[name]}
    refused = {name: values for name, values in changes.items() if not (
        config.allow_setting_change or (name == "drop_unknown" and config.allow_data_change))}
    if refused:
        named = ", ".join(f"{_shown(name, new)} (the run's: {_shown(name, old)})"
                          for name, (old, new) in refused.items())
        raise ConfigError(f"--resume continues the run in {config.out_dir} with its own settings, and the command "
                          f"line changes them: {named}; leave {'that flag' if len(refused) == 1 else 'those flags'} "
                          "out, or pass --allow-setting-change to train with the new values from here on")
    kept = {name: recorded[name] for name in KEPT_ON_RESUME + CHANGEABLE_ON_RESUME
            if name in recorded and name not in given}
    return dataclasses.replace(config, **kept), merged_changes(saved.get("changes", {}), changes)


def merged_changes(earlier: dict, later: dict) -> dict:
    """Changes not yet in a metrics row, then more: a setting changed twice goes from its first old value to its
    last new one."""
    merged = dict(earlier)
    for name, (old, new) in later.items():
        merged[name] = [merged[name][0] if name in merged else old, new]
    return merged


def kept_text(config: TrainConfig, saved: dict) -> tuple:
    """(config, the text to train on, the change {"data": [old, new]} or {}). A resumed run reads the text it
    trained on, unless --data says otherwise; a text other than the run's is a DataError without
    --allow-data-change, whether --data names another or the run's own file has changed since."""
    record = (saved or {}).get("data") if config.resume else None
    if record is None:
        if config.resume and "data" not in config.chosen() and "data" in saved.get("config", {}):
            config = dataclasses.replace(config, data=saved["config"]["data"])       # an older checkpoint
        return config, read_source(config.data), {}
    data_given = "data" in config.chosen()
    if not data_given:
        config = dataclasses.replace(config, data=record["source"])
    try:
        text = read_source(config.data)
    except DataError as e:
        if data_given:
            raise
        raise DataError(f"--resume continues on the run's text, and it cannot be read: {e}; give the text with "
                        "--data") from None
    now = data_record(config.data, text, config.template)
    if now["sha256"] == record["sha256"]:
        return config, text, {}
    if not config.allow_data_change:
        was = f"{record['source']}, SHA-256 {record['sha256'][:12]}..."
        if data_given:
            raise DataError(f"--data {config.data} is not the text the run in {config.out_dir} trained on ({was}); "
                            "leave --data out to continue on that text, or pass --allow-data-change to continue on "
                            "this one")
        what = "text or its --template" if config.template else "text"
        raise DataError(f"the run's {what} has changed since its checkpoint was saved ({was} then, SHA-256 "
                        f"{now['sha256'][:12]}... now); put it back, or pass --allow-data-change to continue on it "
                        "as it is")
    return config, text, {"data": [record, now]}


def _shown(name: str, value) -> str:
    """A setting as its flag says it: --lr 0.001, --drop-unknown, --no-drop-unknown."""
    flag = name.replace("_", "-")
    if isinstance(value, bool):
        return f"--{flag}" if value else f"--no-{flag}"
    return f"--{flag} {value}"
