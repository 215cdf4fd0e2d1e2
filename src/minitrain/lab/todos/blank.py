"""How the lab tells a blank TODO from a wrong one, in one place: a stub raises the core's NotDone (minitrain.todo),
a wrong answer an ExerciseError. A blank is read from the exception itself, or from what it left in another
process's output: a traceback's NotDone line, a notebook's stop (TodoNotDone), a skip line of the student edition's
`make test`. The learner reads it as said(what): "not done yet: <what>", whatever the stub's own message."""

import re

from minitrain.todo import NotDone

TEXT = "not done yet"
HINT = "(write it; `make grade` gives its points)"  # the student edition's skip line, after the TODO's name
STUB = re.compile(r'raise NotDone\("((?:[^"\\]|\\.)*)"\)')  # the stub's line, as the student edition writes it
IMPORT = "from minitrain.todo import NotDone  # what your TODO's stub raises until you write it"
_BEFORE, _AFTER = str(NotDone("\0")).split("\0")  # the core's message around `what`: read, never assumed
_RAISED = re.compile(rf"(?<![\w.])(?:{re.escape(NotDone.__module__)}\.)?{NotDone.__name__}: (.+?)\s*$", re.M)
_STOPPED = re.compile(r"TodoNotDone: (.+?) is blank: ")
_STOP = re.compile(r"TodoNotDone: (.+ is blank: write it in .+?), save the file")
_SKIPPED = re.compile(rf"TODO {TEXT}: (.+?) \(write it")
_QUOTED = re.compile(rf"{TEXT}: ([^\"\\\n]+)")  # said()'s text quoted in another message


class TodoNotDone(NotDone):
    """A notebook's stop at a TODO still blank: IPython shows it as one line (what, where, what to do)."""

    def __init__(self, what: str, where: str) -> None:
        NotImplementedError.__init__(self, f"{what} is blank: write it in {where}, save the file, then run this "
                                           "cell again")
        self.what = what

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


def said(what: str) -> str:
    """What the learner reads of a blank TODO: "not done yet: <what>"."""
    return f"{TEXT}: {what}"


def stub(what: str) -> str:
    """The stub's raise line for `what` (without indentation), as STUB reads it back."""
    escaped = what.replace("\\", "\\\\").replace('"', '\\"')
    return f'raise NotDone("{escaped}")'


def stub_in(line: str) -> str | None:
    """The TODO a source line's stub names, or None: the static check of a learner's file."""
    m = STUB.search(line)
    return re.sub(r"\\(.)", r"\1", m[1]) if m else None


def what(e: BaseException) -> str | None:
    """The TODO a blank's exception names, or None: no other exception (a wrong answer's ExerciseError) is blank. An
    earlier edition's stub, NotImplementedError(said(what)), still in a submission, is read too."""
    if isinstance(e, NotDone):
        return e.what
    if isinstance(e, NotImplementedError) and str(e).startswith(f"{TEXT}: "):
        return str(e).removeprefix(f"{TEXT}: ")
    return None


def told(e: NotImplementedError) -> str:
    """A stub's exception as the learner reads it: said(what) for a blank, the message of any other."""
    return str(e) if (todo := what(e)) is None else said(todo)


def skipped(what: str) -> str:
    """The student edition's skip line for a TODO still blank."""
    return f"TODO {said(what)} {HINT}"


def _unwrapped(message: str) -> str:
    """`what` from the core's message (its text around `what` read from minitrain.todo, never assumed)."""
    if message.startswith(_BEFORE) and message.endswith(_AFTER) and len(message) > len(_BEFORE) + len(_AFTER):
        return message[len(_BEFORE):len(message) - len(_AFTER)]
    return message


def raised_in(line: str) -> str | None:
    """The TODO a traceback's last line names ("minitrain.todo.NotDone: ...", IPython's "NotDone: ..."), or None."""
    m = _RAISED.search(line)
    return _unwrapped(m[1]) if m else None


def stop_in(line: str) -> str | None:
    """A notebook's stop in a line of its output, as "<what> is blank: write it in <where>", or None."""
    m = _STOP.search(line)
    return m[1] if m else None


def named(text: str) -> list[str]:
    """Every TODO another process's output names as blank, tracebacks first, then notebooks' stops, skip lines and
    said()'s text quoted elsewhere."""
    return ([_unwrapped(m[1]) for m in _RAISED.finditer(text)] + [m[1] for m in _STOPPED.finditer(text)]
            + [m[1] for m in _SKIPPED.finditer(text)] + [m[1] for m in _QUOTED.finditer(text)])


def in_output(text: str) -> str | None:
    """The first TODO another process's output names as blank, or None."""
    return next(iter(named(text)), None)
