"""The per-rule conda environments pin exactly what requirements.lock pins."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def lock_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==([^\s;]+)", line)
        if match:
            pins[match.group(1).lower().replace("_", "-")] = match.group(2)
    return pins


def env_pins(path: Path) -> dict[str, str]:
    env = yaml.safe_load(path.read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    return {name.lower().replace("_", "-"): version for name, version in (p.split("==") for p in pip if "==" in p)}


def test_every_env_pin_matches_the_lock():
    lock = lock_pins()
    envs = sorted((ROOT / "envs").glob("*.yaml"))
    assert {p.stem for p in envs} == {"train", "eval", "report"}
    for path in envs:
        pins = env_pins(path)
        assert "torch" in pins
        for name, version in pins.items():
            assert lock.get(name) == version, f"{path.name}: {name}=={version}, lock has {lock.get(name)}"


def test_lock_pins_the_project_dependencies():
    lock = lock_pins()
    assert lock["torch"] == "2.13.0"
    pyproject = (ROOT / "pyproject.toml").read_text()
    for dep in re.findall(r'^\s+"([A-Za-z0-9_.-]+)==([^"]+)",', pyproject, re.M):
        assert lock.get(dep[0].lower().replace("_", "-")) == dep[1], dep


def test_every_rule_names_an_existing_env():
    for smk in (ROOT / "workflow" / "rules").glob("*.smk"):
        for env in re.findall(r'conda:\n\s+"([^"]+)"', smk.read_text()):
            assert (smk.parent / env).resolve().is_file(), (smk.name, env)
