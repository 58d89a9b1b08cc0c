"""A measured change handed back as an edit of the user's files: a unified diff against each file as it was when
the run started (its sha256 kept in RUN/sources.json), paths relative to the folder the run started in with `a/`
and `b/` prefixes, so `git apply` and `patch -p1` take it there.

Each part of a change is written as what does the same in the user's code, and said as such: a keyword argument
on the DataLoader(...) or optimizer call the capture recorded; under a training framework, its setting on the
user's TrainingArguments(...) or Trainer(...) call; a backend flag, as the statement after the script's
`import torch`; an environment variable diagnose set for the run, as the command line that sets it; and a change
of the training loop itself (mixed precision, compiling, caching) is no edit diagnose can write: its snippet is
given to adapt."""
from __future__ import annotations

import ast
import difflib
import hashlib
import os
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

import diagnose.frameworks.catalog as frameworks
from diagnose.experiments.diffs import call_at, framework_edits, site_location, with_keywords
from diagnose.formatting import setting_label
from diagnose.model import Change, Experiment, ExperimentResults, FileEdit, HandBack, HandBacks, SourceFiles, Verdict
from diagnose.optimizations import REGISTRY
from diagnose.optimizations.base import Context

SITE_CALLS = {"loader": "DataLoader", "optimizer": "the optimizer", "compile": "torch.compile",
              "ddp": "DistributedDataParallel"}


@dataclass
class Written:
    """One hand-back, built: its record and the texts to write beside it."""
    record: HandBack
    patch: str  # "" when no part is an edit
    note: str  # Markdown: how each part is written, and the snippets that are not edits


@dataclass
class _FileWork:
    path: Path  # absolute
    name: str  # relative to the folder the run started in
    before: str
    keyword_edits: dict[int, dict[str, str]] = field(default_factory=dict)  # call line -> keyword -> source text
    statements: list[str] = field(default_factory=list)  # after the script's `import torch`


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _sha256_file(path: Path) -> Optional[str]:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _relative(path: Path, folder: Path) -> Optional[str]:
    try:
        return Path(os.path.abspath(path)).relative_to(Path(os.path.abspath(folder))).as_posix()
    except ValueError:
        return None


class _Builder:
    """The parts of one change set, gathered per file, then written as one diff per file."""

    def __init__(self, ctx: Context, sources: SourceFiles):
        self.ctx, self.sources, self.folder = ctx, sources, Path(sources.folder)
        self.files: dict[str, _FileWork] = {}
        self.said: list[str] = []  # how each part is written
        self.not_edits: list[str] = []  # what is not an edit of a file (command lines, snippets)
        self.snippets: list[tuple[str, str]] = []  # (label, code) to adapt

    def _file(self, location_or_path: str) -> tuple[Optional[_FileWork], str]:
        """The file a part edits, or why it cannot be edited."""
        path = Path(location_or_path)
        if not path.is_absolute():
            path = self.folder / path
        name = _relative(path, self.folder)
        if name is None:
            return None, f"{path} lies outside the folder the run started in ({self.folder})"
        if name in self.files:
            return self.files[name], ""
        try:
            text = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            return None, f"{name} could not be read ({exc.__class__.__name__})"
        start = self.sources.sha256.get(name)
        if start is not None and start != sha256_text(text):
            return None, f"{name} changed during the run: the edit would not be against the file the run measured"
        self.files[name] = _FileWork(path, name, text)
        return self.files[name], ""

    def add(self, change: Change) -> None:
        optimization = REGISTRY.get(change.id)
        if optimization is None:
            return
        label = setting_label(change.id, change.setting)
        framework_site = framework_edits(change, self.ctx)
        if framework_site is not None:
            location, edits = framework_site
            framework = frameworks.get(self.ctx.capture.framework.name)
            how = ("diagnose set it as that setting during the run" if change.id in framework.applied_as_setting
                   else "diagnose made the same change through hooks during the run")
            self._keywords(label, location, edits, f"{framework.title}'s setting on your {framework.call}(...) call; "
                                                   f"{how}", optimization.snippet(change.setting, self.ctx))
            return
        edits = optimization.keyword_edits(change.setting)
        location = site_location(optimization.site, self.ctx)
        edited = False
        if edits and location:
            call = SITE_CALLS.get(optimization.site, optimization.site)
            edited = self._keywords(label, location, edits, f"a keyword argument of {call}(...) where your code "
                                    "builds it", optimization.snippet(change.setting, self.ctx))
        if optimization.module_code:
            edited = self._statements(label, optimization.module_code) or edited
        environment = optimization.environment(change.setting)
        if environment:
            command = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in environment.items()), "python",
                                *map(shlex.quote, [self._script_name(), *self.ctx.capture.script_args])])
            self.not_edits.append(f"{label}: an environment variable diagnose set for the run; set it where you "
                                  f"launch the script: `{command}`")
            edited = True
        if optimization.snippet_too and edited or not edited:
            code = optimization.snippet(change.setting, self.ctx)
            why = ("the other half of this change is in your training loop" if edited
                   else "no edit diagnose can write: it changes how your code trains, not an argument")
            self.not_edits.append(f"{label}: {why}; adapt the code below")
            if code:
                self.snippets.append((label, code))

    def _script_name(self) -> str:
        return _relative(Path(self.ctx.capture.script), self.folder) or self.ctx.capture.script

    def _keywords(self, label: str, location: str, edits: dict[str, str], how: str, snippet: str) -> bool:
        path, _, line = location.rpartition(":")
        work, why = self._file(path) if line.isdigit() else (None, f"no line recorded for {location}")
        if work is not None and not self._call_found(work, int(line)):
            work, why = None, f"no call at {work.name}:{line} in the file as it is"
        if work is None:
            self.not_edits.append(f"{label}: not written as an edit ({why}); set "
                                  f"{', '.join(f'{k}={v}' for k, v in edits.items())} by hand")
            if snippet:
                self.snippets.append((label, snippet))
            return True
        work.keyword_edits.setdefault(int(line), {}).update(edits)
        said = ", ".join(f"{k}={v}" for k, v in edits.items())
        self.said.append(f"{label}: `{said}` written at {work.name}:{line}, as {how}")
        return True

    @staticmethod
    def _call_found(work: _FileWork, line: int) -> bool:
        try:
            return call_at(ast.parse(work.before), line) is not None
        except SyntaxError:
            return False

    def _statements(self, label: str, code: str) -> bool:
        work, why = self._file(self.ctx.capture.script)
        if work is not None and _import_torch_line(work.before) is None:
            work, why = None, f"{work.name} has no top-level `import torch` to put it after"
        if work is None:
            self.not_edits.append(f"{label}: not written as an edit ({why}); add it after `import torch`")
            self.snippets.append((label, code))
            return True
        work.statements.append(code)
        self.said.append(f"{label}: written after `import torch` in {work.name}, as the statement that does what "
                         "diagnose's hook did during the run")
        return True

    def diffs(self) -> tuple[str, list[FileEdit]]:
        texts, edits = [], []
        for name in sorted(self.files):
            work = self.files[name]
            after = _edited(work)
            if after == work.before:
                continue
            texts.append(unified_diff(name, work.before, after))
            edits.append(FileEdit(name, sha256_text(work.before), sha256_text(after)))
        return "".join(texts), edits


def _import_torch_line(source: str) -> Optional[int]:
    """The last line of the first top-level `import torch` statement (None: none)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.Import) and any(a.name == "torch" for a in node.names):
            return node.end_lineno
    return None


def _edited(work: _FileWork) -> str:
    source = work.before
    for line in sorted(work.keyword_edits, reverse=True):  # from the bottom: the lines above keep their numbers
        call = call_at(ast.parse(source), line)
        if call is not None:
            source = with_keywords(source, call, work.keyword_edits[line])
    if work.statements:
        after = _import_torch_line(source)
        lines = source.splitlines(keepends=True)
        if after is not None:
            if lines and not lines[after - 1].endswith("\n"):
                lines[after - 1] += "\n"
            added = "".join(f"{code.rstrip()}\n" for code in dict.fromkeys(work.statements))
            lines.insert(after, added)
            source = "".join(lines)
    return source


def unified_diff(name: str, before: str, after: str) -> str:
    """`git diff`'s form: a/ and b/ prefixes, three lines of context, the last line's missing newline said."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    out = []
    for line in difflib.unified_diff(old, new, f"a/{name}", f"b/{name}", n=3):
        if line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n\\ No newline at end of file\n")
    return "".join(out)


def hand_back(name: str, experiment: Experiment, ctx: Context, sources: SourceFiles) -> Written:
    """The experiment's changes as one patch (several files: one diff each) and its note."""
    builder = _Builder(ctx, sources)
    for change in experiment.changes:
        builder.add(change)
    patch, edits = builder.diffs()
    label = (f"combined: {', '.join(experiment.setting.get('changes', ()))}" if experiment.optimization == "combined"
             else setting_label(experiment.optimization, experiment.setting))
    record = HandBack(name=name, experiment=experiment.optimization, label=label, verdict=experiment.verdict,
                      speedup=experiment.speedup, edits=tuple(edits), not_edits=tuple(builder.not_edits))
    return Written(record, patch, _note(record, builder, patch))


def _note(record: HandBack, builder: _Builder, patch: str) -> str:
    measured = (f"{record.speedup:.2f}x, {record.verdict}" if record.speedup is not None else record.verdict)
    lines = [f"# {record.label}", "", f"Measured by diagnose: {measured}.", ""]
    if patch:
        lines += [f"`{record.name}.patch` edits {', '.join(e.path for e in record.edits)}, as the files were when the "
                  "run started. In that folder: `git apply` or `patch -p1` takes it, or `diagnose apply RUN"
                  + ("" if record.name == "verified" else f" --change {record.name}") + "`.", ""]
    lines += [f"- {s}" for s in builder.said]
    lines += [f"- {s}" for s in builder.not_edits]
    for label, code in dict.fromkeys(builder.snippets):
        lines += ["", f"{label}:", "", "```python", code.rstrip(), "```"]
    return "\n".join(lines).rstrip() + "\n"


def names(experiments: tuple[Experiment, ...]) -> dict[int, str]:
    """A name per measured change (index into experiments -> name): the optimization's id for its best setting,
    id-value for a sweep's others; "verified" is the combination's."""
    measured = [i for i, e in enumerate(experiments) if e.changes and e.optimization not in ("combined", "ceiling")
                and e.verdict in _HANDED_BACK]
    found: dict[int, str] = {}
    by_id: dict[str, list[int]] = {}
    for i in measured:
        by_id.setdefault(experiments[i].optimization, []).append(i)
    for optimization, indices in by_id.items():
        indices.sort(key=lambda i: (experiments[i].verdict != Verdict.FASTER, -(experiments[i].speedup or 0)))
        found[indices[0]] = optimization
        for i in indices[1:]:
            value = "-".join(str(v) for v in experiments[i].setting.values()) or str(i)
            found[i] = f"{optimization}-{value}".replace("/", "_").replace(" ", "")
    return found


# the verdicts of changes that ran and were measured (or made an out-of-memory script fit): those handed back
_HANDED_BACK = {Verdict.FASTER, Verdict.SLOWER, Verdict.NO_CHANGE, Verdict.UNDECIDED, Verdict.FLAGGED, Verdict.FITS}


def verified_index(experiments: tuple[Experiment, ...], headline_changes: tuple[str, ...],
                   headline_verdict: str) -> Optional[int]:
    """The experiment the headline verified faster: the combination when it ran, else the single change named."""
    if headline_verdict != Verdict.FASTER:
        return None
    for i, e in enumerate(experiments):
        if e.optimization == "combined" and e.verdict == Verdict.FASTER and e.changes:
            return i
    if len(headline_changes) == 1:
        for i, e in enumerate(experiments):
            if (e.verdict == Verdict.FASTER and e.optimization not in ("combined", "ceiling")
                    and setting_label(e.optimization, e.setting) == headline_changes[0]):
                return i
    return None


def write_hand_backs(run_dir: Path, results: ExperimentResults, ctx: Context,
                     sources: SourceFiles) -> ExperimentResults:
    """RUN/changes/NAME.patch and NAME.md for each measured change, RUN/verified.patch and verified.md for the
    verified one (the combination), RUN/changes/changes.json for `diagnose apply`; the results with each
    experiment's (and the headline's) patch named."""
    from diagnose.record.run_record import RunRecord

    record = RunRecord(run_dir)
    experiments = list(results.experiments)
    records: list[HandBack] = []
    named = names(results.experiments)
    headline = results.headline
    verified = (verified_index(results.experiments, headline.changes, headline.verdict) if headline is not None
                else None)
    jobs = [(i, name, *record.change_paths(name)) for i, name in named.items()]
    if verified is not None:
        jobs.append((verified, "verified", *record.verified_paths()))
    for index, name, patch_path, note_path in jobs:
        written = hand_back(name, experiments[index], ctx, sources)
        patch_path.parent.mkdir(parents=True, exist_ok=True)
        if written.patch:
            patch_path.write_text(written.patch, encoding="utf-8")
        note_path.write_text(written.note, encoding="utf-8")
        relative = patch_path.relative_to(run_dir).as_posix() if written.patch else ""
        records.append(replace(written.record, patch=relative, note=note_path.relative_to(run_dir).as_posix()))
        if name == "verified" and headline is not None:
            headline = replace(headline, patch=relative)
        elif name != "verified":
            experiments[index] = replace(experiments[index], patch=relative)
    if records:
        record.save_hand_backs(HandBacks(sources.folder, tuple(records)))
    return replace(results, experiments=tuple(experiments), headline=headline)
