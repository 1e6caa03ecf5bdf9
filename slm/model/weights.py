"""An slm checkpoint directory: `config.json` (the ModelConfig fields) + `model.safetensors`.

Loading uses safetensors only, so no pickle is ever executed. Tied weights are stored once.

Before anything is allocated, `check_checkpoint` reads config.json and the safetensors header (shapes only)
and raises CheckpointError, a ValueError whose message is one line naming the file, when the config is not
valid JSON or not valid ModelConfig fields, the weights file is missing or not safetensors (a pickle, say),
the config describes more parameters than the file holds, or the model would not fit in memory
(`check_memory`). `load_model` runs it, then compares every tensor's shape with the built model's.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import safetensors.torch
import torch
from safetensors import SafetensorError, safe_open
from torch import nn

from slm.model.config import ModelConfig, upgrade_fields
from slm.model.networks import build_model

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
PICKLE_SUFFIXES = (".bin", ".ckpt", ".pt", ".pth", ".pkl", ".pickle")
"""Weights files of torch.save / Lightning: pickles, which slm never loads."""

CPU_LOAD_FACTOR = 2
"""The model is built in float32 on the CPU and the file's tensors are read next to it before the copy:
loading needs about twice the float32 weights in CPU memory, whatever the target device and dtype."""
DEVICE_MARGIN = 1.25
"""On an accelerator: the weights in the evaluation dtype plus a quarter for activations and KV caches."""


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded; the message is one line naming the file."""


def save_model(model: nn.Module, directory: str | os.PathLike) -> Path:
    """Write config and weights into `directory` (created if missing); each file atomically (slm.atomic), so a
    reader never sees half a file and a kill or a full disk keeps the previous one."""
    from slm.atomic import atomic_save, atomic_write

    out = Path(directory)
    atomic_save(out / WEIGHTS_FILE, lambda tmp: safetensors.torch.save_model(model, str(tmp)), verb="saving")
    text = json.dumps(model.cfg.to_dict(), indent=2) + "\n"
    atomic_write(out / CONFIG_FILE, lambda f: f.write(text.encode()), verb="saving")
    return out


def _pickle_note(path: Path) -> str:
    return (f"{path} is a PyTorch pickle (torch.save), not an slm checkpoint: slm loads safetensors only, so "
            f"that no pickle is ever executed; give the directory with {CONFIG_FILE} and {WEIGHTS_FILE}")


def resolve_model_dir(path: str | os.PathLike) -> Path:
    """The checkpoint directory of a run directory (`<run>/model`) or of a checkpoint directory itself."""
    path = Path(path).expanduser()
    for candidate in (path / "model", path):
        if (candidate / CONFIG_FILE).is_file():
            return candidate
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such run or checkpoint directory")
    if path.is_file():
        if path.suffix in PICKLE_SUFFIXES or _is_pickle(path):
            raise FileNotFoundError(_pickle_note(path))
        if path.name in (CONFIG_FILE, WEIGHTS_FILE):
            raise FileNotFoundError(f"{path}: a file; give its directory, {path.parent}")
        raise FileNotFoundError(f"{path}: a file, not a run or checkpoint directory")
    model = path / "model"
    if model.is_dir():
        if not any(model.iterdir()):
            raise FileNotFoundError(f"{model} is empty: the run saved no model (slm-train writes it when "
                                    "training ends; is it still running, or did it fail? its result.json says)")
        raise FileNotFoundError(f"{model} has no {CONFIG_FILE}: restore the file slm-train wrote (the ModelConfig "
                                "fields; the run's result.json lists them under model)")
    raise FileNotFoundError(f"{path}: not a run directory (no model/{CONFIG_FILE}) nor a checkpoint directory "
                            f"(no {CONFIG_FILE})")


def _is_pickle(path: Path) -> bool:
    """A torch.save file: a zip archive (PyTorch >= 1.6) or a bare pickle (protocol 2+). A safetensors file (an
    8-byte little-endian header length, then the JSON header's "{") is never one, whatever its first byte."""
    try:
        with open(path, "rb") as f:
            head = f.read(9)
        size = path.stat().st_size
    except OSError:
        return False
    if len(head) == 9 and head[8:9] == b"{" and int.from_bytes(head[:8], "little") + 8 <= size:
        return False
    return head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"


def _read_fields(path: Path) -> dict:
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise CheckpointError(f"{path}: not a text file; it should hold the ModelConfig fields as JSON "
                              "(restore the file slm-train wrote)") from None
    try:
        fields_ = json.loads(text)
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path}: not valid JSON (line {err.lineno} column {err.colno}: {err.msg}); "
                              "restore the file slm-train wrote") from None
    if not isinstance(fields_, dict):
        raise CheckpointError(f"{path}: a JSON {type(fields_).__name__}, not an object of ModelConfig fields; "
                              "restore the file slm-train wrote")
    return fields_


def _config_file(directory: str | os.PathLike) -> Path:
    path = Path(directory) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {CONFIG_FILE} in {directory}: not an slm checkpoint directory")
    return path


def load_config(directory: str | os.PathLike) -> ModelConfig:
    """The ModelConfig of a checkpoint directory. FileNotFoundError without config.json; CheckpointError
    (one line naming the file and the field) for invalid JSON, unknown fields or invalid values."""
    path = _config_file(directory)
    fields_ = _read_fields(path)
    try:
        unknown = sorted(set(upgrade_fields(fields_)) - set(ModelConfig.field_names()))
        if unknown:
            raise CheckpointError(f"unknown field(s) {', '.join(map(repr, unknown))}: not ModelConfig fields "
                                  "(remove them, or restore the file slm-train wrote)")
        return ModelConfig.from_dict(fields_)
    except (TypeError, ValueError) as err:  # ConfigError names the field and what is allowed
        raise CheckpointError(f"{path}: {' '.join(str(err).split())}") from None


def read_header(path: str | os.PathLike) -> dict[str, list[int]]:
    """Tensor name -> shape from a safetensors file's header (no tensor data is read). CheckpointError
    when the file is missing, a pickle, or not a valid safetensors file."""
    path = Path(path)
    if not path.is_file():
        others = sorted(p.name for p in path.parent.iterdir() if p.suffix in PICKLE_SUFFIXES) \
            if path.parent.is_dir() else []
        if others:
            raise CheckpointError(f"no {WEIGHTS_FILE} in {path.parent}, only {', '.join(others)}: slm loads "
                                  "safetensors only, so that no pickle is ever executed")
        raise CheckpointError(f"{path}: no such file; the checkpoint directory needs {CONFIG_FILE} and "
                              f"{WEIGHTS_FILE}")
    if _is_pickle(path):
        raise CheckpointError(_pickle_note(path))
    try:
        with safe_open(str(path), framework="pt") as f:
            return {name: list(f.get_slice(name).get_shape()) for name in f.keys()}
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{path}: not a valid safetensors file ({' '.join(str(err).split())}); "
                              "restore it, or save the checkpoint again") from None


def _size(n_bytes: float) -> str:
    """1.5 GiB, 768.0 TiB, ... (binary units, PiB at most)."""
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    power = 0
    while power < len(units) - 1 and n_bytes >= 1024 ** (power + 1):
        power += 1
    return f"{n_bytes / 1024 ** power:.1f} {units[power]}" if power else f"{int(n_bytes)} B"


def available_memory(device: torch.device | str) -> int | None:
    """Bytes free for a new model on `device`: CUDA's free memory (torch.cuda.mem_get_info); on the CPU
    /proc/meminfo's MemAvailable (else os.sysconf's available pages), capped by a cgroup v2 memory limit less
    the group's usage (reclaimable page cache, inactive_file, not counted as used); None where it cannot be
    told (e.g. mps)."""
    device = torch.device(device)
    if device.type == "cuda":
        try:
            return torch.cuda.mem_get_info(device)[0] if torch.cuda.is_available() else None
        except RuntimeError:  # a device index that does not exist, a CUDA error: the load itself will say
            return None
    if device.type != "cpu":
        return None
    free = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                free = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if free is None:
        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    try:
        cgroup = Path("/sys/fs/cgroup")
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            used = int((cgroup / "memory.current").read_text())
            stat = dict(line.split() for line in (cgroup / "memory.stat").read_text().splitlines())
            free = min(free, int(limit) - used + int(stat.get("inactive_file", 0)))
    except (OSError, ValueError):
        pass
    return free


def check_memory(cfg: ModelConfig, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                 config_file: str | os.PathLike = CONFIG_FILE, note: str = "") -> None:
    """Refuse (CheckpointError) a model that would not fit: from its parameter count (slm.model.count, nothing
    allocated), CPU_LOAD_FACTOR x the float32 weights must fit in free CPU memory (the model is built there),
    and on an accelerator DEVICE_MARGIN x the weights in `dtype` in its free memory. `note` ends the message."""
    from slm.model.counting import count

    device = torch.device(device)
    params = count(cfg).params_total
    checks = [(torch.device("cpu"), torch.float32, CPU_LOAD_FACTOR)]
    if device.type != "cpu":
        checks.append((device, dtype, DEVICE_MARGIN))
    for where, kind, factor in checks:
        free = available_memory(where)
        weights = params * kind.itemsize
        if free is not None and weights * factor > free:
            dtype_name = str(kind).removeprefix("torch.")
            raise CheckpointError(f"{config_file} describes a model of {params:.2g} parameters ({_size(weights)} "
                                  f"in {dtype_name}, about {_size(weights * factor)} to load); the {where} has "
                                  f"{_size(free)} available{note}")


def check_checkpoint(directory: str | os.PathLike, device: torch.device | str = "cpu",
                     dtype: torch.dtype = torch.float32) -> ModelConfig:
    """The directory's ModelConfig, after checking, without allocating the model, that config.json is valid,
    model.safetensors is a safetensors file whose header holds as many parameters as the config describes,
    and the model fits in memory on `device` in `dtype` (check_memory). Raises CheckpointError (one line)."""
    return _checked(directory, device, dtype)[0]


def _checked(directory: str | os.PathLike, device, dtype) -> tuple[ModelConfig, dict[str, list[int]]]:
    """check_checkpoint's work: the config and the weights file's header (tensor name -> shape)."""
    directory = Path(directory)
    config_file, weights_file = _config_file(directory), directory / WEIGHTS_FILE
    fields_ = _read_fields(config_file)
    header = read_header(weights_file)
    n_layers = fields_.get("n_layers")
    if (fields_.get("kind", "transformer") == "transformer" and isinstance(n_layers, int)
            and not isinstance(n_layers, bool) and n_layers > len(header)):
        # every block has weights: checked before ModelConfig, whose derived lists are n_layers long
        raise CheckpointError(f"{weights_file} does not match {config_file}: n_layers={n_layers} in the config, "
                              f"but the file holds only {len(header)} tensors; restore the config slm-train wrote")
    cfg = load_config(directory)
    stored = sum(math.prod(shape) for shape in header.values())
    from slm.model.counting import count

    params = count(cfg).params_total
    mismatch = (f"; {weights_file.name} holds {stored:.2g} parameters, so {config_file.name} does not match it"
                if stored != params else "")
    check_memory(cfg, device, dtype, config_file, mismatch)
    if mismatch:
        try:  # the model fits, so its modules can be built on the meta device (no memory) to name a tensor
            with torch.device("meta"):
                model = build_model(cfg)
        except Exception:  # noqa: BLE001 - only for a better message; the count below still refuses
            model = None
        if model is not None:
            check_shapes(model, header, weights_file, config_file)
        raise CheckpointError(f"{weights_file} does not match {config_file}: the config describes {params:,} "
                              f"parameters, the file holds {stored:,}; restore the config slm-train wrote")
    return cfg, header


def check_shapes(model: nn.Module, header: dict[str, list[int]], weights_file: Path, config_file: Path) -> None:
    """CheckpointError naming the first tensor whose shape in the file differs from the model's, else the
    first the model has and the file lacks (tied weights are stored under one of their names), else the
    first the file has and the model lacks."""
    def fail(what: str) -> None:
        raise CheckpointError(f"{weights_file} does not match {config_file}: {what}; restore the config "
                              "slm-train wrote")

    names: dict[int, list[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        names.setdefault(id(tensor), []).append(name)
        if name in header and list(tensor.shape) != header[name]:
            fail(f"{name} has shape {header[name]} in the file, {list(tensor.shape)} in the model")
    missing = [group[0] for group in names.values() if not any(n in header for n in group)]
    if missing:
        fail(f"the model has {len(missing)} tensor(s) the file lacks, e.g. {missing[0]}")
    known = {n for group in names.values() for n in group}
    unexpected = [n for n in header if n not in known]
    if unexpected:
        fail(f"the file has {len(unexpected)} tensor(s) the model lacks, e.g. {unexpected[0]}")


def load_model(directory: str | os.PathLike, device: torch.device | str = "cpu",
               dtype: torch.dtype = torch.float32):
    """Build the model from `config.json`, load `model.safetensors` strictly and move it to `device` in `dtype`,
    after check_checkpoint (config, header, memory on `device`) and a shape check of every tensor;
    CheckpointError (one line) for a checkpoint that cannot load."""
    directory = Path(directory)
    config_file, weights_file = directory / CONFIG_FILE, directory / WEIGHTS_FILE
    cfg, header = _checked(directory, device, dtype)
    model = build_model(cfg)
    check_shapes(model, header, weights_file, config_file)
    try:
        safetensors.torch.load_model(model, str(weights_file), strict=True)
    except (RuntimeError, SafetensorError) as err:  # missing or unexpected tensors; a file changed meanwhile
        raise CheckpointError(f"{weights_file} does not match {config_file}: "
                              f"{' '.join(str(err).split())[:400]}") from None
    return model.to(device, dtype)
