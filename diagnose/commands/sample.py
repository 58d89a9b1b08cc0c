"""`diagnose sample [NAME]`: the bundled sample scripts (sample_runs/ in a clone, inside the installed package
otherwise), listed, or one copied into a folder of the user's to run: `diagnose sample slow_loader` then
`diagnose run slow_loader.py`. Nothing is overwritten."""
from __future__ import annotations

import ast
import shutil
from pathlib import Path

from diagnose.errors import UserError
from diagnose.resources import bundled


def samples() -> dict[str, Path]:
    """name -> the sample's script or folder."""
    folder = bundled("sample_runs")
    found = {p.stem: p for p in folder.glob("*.py")}
    found.update({p.name: p for p in folder.iterdir() if p.is_dir() and (p / "train.py").exists()})
    return dict(sorted(found.items()))


def summary(path: Path) -> str:
    script = path / "train.py" if path.is_dir() else path
    doc = ast.get_docstring(ast.parse(script.read_text(encoding="utf-8"))) or ""
    return " ".join(doc.strip().split("\n\n")[0].split())  # the first paragraph, on one line


def sample_command(name: str, to: Path) -> str:
    """Copy sample `name` into `to`; returns the command that runs it."""
    known = samples()
    name = name.removesuffix(".py")
    if name not in known:
        raise UserError(f"no sample named {name}", f"the samples: {', '.join(known)} (diagnose sample lists them)")
    source = known[name]
    target = to / source.name
    if target.exists():
        raise UserError(f"{target} already exists", "diagnose never overwrites files: pass --to a new folder")
    to.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, target)
        return f"diagnose run {target / 'train.py'}"
    shutil.copy2(source, target)
    return f"diagnose run {target}"
