"""A module or script run as `python [-m] TARGET ARGS` runs it, in a process that already exists (a child forked from
a server that has imported torch), ending as the interpreter would, except that non-daemon threads are not waited for
and nothing is finalized after the atexit functions (the caller's os._exit). Standard library only: the graders' process
server (lab.grading.forkserver) uses it before anything of the graded tree is imported."""

import atexit
import runpy
import sys


def run_as_main(target: str, args: list[str], module: bool) -> int:
    """TARGET as __main__ with sys.argv [TARGET, *ARGS] (a script's folder is not put on sys.path: the lab's scripts
    import installed packages only); its exit status: 0, SystemExit's (its message printed), or 1 once sys.excepthook
    printed an uncaught exception. atexit's functions run last, as at an interpreter's exit."""
    code = 1
    try:
        sys.argv = [target, *args]
        if module:
            sys.modules.pop(target, None)  # imported already (the caller's): run afresh, as `python -m` does
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
    except BaseException:
        sys.excepthook(*sys.exc_info())  # torch's, in a rank of a group, prefixes each line with [rankR]
    finally:
        atexit._run_exitfuncs()  # the hang watch, among others, is stopped there
        sys.stdout.flush()
        sys.stderr.flush()
    return code
