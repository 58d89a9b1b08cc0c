"""Render one ReportView as HTML (Jinja, autoescaped, user-overridable templates) and write report.html."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import jinja2

from diagnose.errors import UserError
from diagnose.formatting import NUMBER_FILTERS, display_location
from diagnose.model import Analysis, Capture, Diagnosis
from diagnose.record.run_record import RunRecord
from diagnose.report.view import build_view
from diagnose.resources import bundled

TEMPLATE_EXTENSIONS = ("j2", "html", "css")


def template_environment(templates_dir: Optional[str] = None) -> jinja2.Environment:
    """The user's templates folder first (to override any template), then the bundled one."""
    loaders = [jinja2.FileSystemLoader(templates_dir)] if templates_dir else []
    loaders.append(jinja2.FileSystemLoader(str(bundled("templates"))))
    env = jinja2.Environment(loader=jinja2.ChoiceLoader(loaders), autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, bytecode_cache=_bytecode_cache())
    env.filters.update(NUMBER_FILTERS, where=display_location)  # the rules' own formats
    return env


def _bytecode_cache() -> Optional[jinja2.BytecodeCache]:
    """Compiled templates kept between runs (keyed by source checksum, like .pyc files), when the user's cache
    folder is writable: compiling the report template costs more than rendering it."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(base, "diagnose", "jinja")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None
    return jinja2.FileSystemBytecodeCache(folder) if os.access(folder, os.W_OK) else None


def check_templates(templates_dir: Optional[str]) -> None:
    """Compile every template now, so a syntax error in the user's override stops diagnose before the run
    rather than after it."""
    env = template_environment(templates_dir)
    for name in env.list_templates(extensions=TEMPLATE_EXTENSIONS):
        try:
            env.get_template(name)
        except jinja2.TemplateSyntaxError as exc:
            raise UserError(f"template {exc.filename or name}, line {exc.lineno}: {exc.message}",
                            "fix the template, or remove it from --templates to use the bundled one")
        except UnicodeDecodeError:
            raise UserError(f"template {name} in {templates_dir} is not UTF-8 text")


def render_html(view, templates_dir: Optional[str] = None) -> str:
    return template_environment(templates_dir).get_template("report.html.j2").render(view=view)


def write_reports(run_dir: Path, capture: Optional[Capture], analysis: Optional[Analysis], diagnosis: Diagnosis,
                  templates_dir: Optional[str] = None, trace_files: Optional[tuple[str, ...]] = None,
                  tensorboard_dir: str = "") -> Path:
    record = RunRecord(run_dir)
    view = build_view(run_dir, capture, analysis, diagnosis, record.samples(), trace_files, tensorboard_dir)
    return record.save_report(render_html(view, templates_dir))
