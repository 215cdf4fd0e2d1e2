"""Execute one notebook with papermill, its kernel on Unix sockets (IPC) instead of TCP ports.

    python -m minitrain.lab.execute SRC DST [JSON_PARAMETERS]

A kernel that papermill or nbclient starts listens on 127.0.0.1 TCP ports by default, unencrypted
("Kernel is running over TCP without encryption"); with the IPC transport it listens on Unix
sockets in Jupyter's private runtime folder, guarded by file permissions: no channel on a port
(ipykernel still opens one keyed pipe port on 127.0.0.1 for forked subprocesses' output).
Windows has no IPC transport: there the kernel stays on TCP.
"""

import json
import sys
import uuid
from pathlib import Path

from jupyter_client import AsyncKernelManager, KernelManager
from jupyter_core.paths import jupyter_runtime_dir
from traitlets import HasTraits, default

from minitrain.cli import BAD_USAGE, SettingError, lab_out_folder
from minitrain.paths import relative

KERNEL = "python3"  # papermill resolves it to the calling interpreter


def without_iri_grammar() -> None:
    """Keep jsonschema (under nbformat) from importing rfc3987_syntax, whose "iri" format check builds a
    grammar at import: about 1 s of CPU in every process that reads a notebook; no notebook field is an IRI."""
    sys.modules.setdefault("rfc3987_syntax", None)  # None in sys.modules: that import raises ImportError


class IPCTransport(HasTraits):
    """The IPC transport where the platform has it, each kernel with its own socket prefix."""

    @default("transport")
    def _transport_default(self) -> str:
        return "tcp" if sys.platform == "win32" else "ipc"

    @default("ip")
    def _ip_default(self) -> str:
        # jupyter_client's default, "kernel-ipc" in the working folder, collides between kernels
        # started side by side: give each its own socket prefix in Jupyter's private runtime folder
        if self.transport != "ipc":
            return "127.0.0.1"
        runtime = Path(jupyter_runtime_dir())
        runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
        return str(runtime / f"minitrain-{uuid.uuid4().hex[:12]}-ipc")


class IPCKernelManager(IPCTransport, AsyncKernelManager):
    """papermill's (and nbclient's) kernel manager, on IPC."""


class SyncIPCKernelManager(IPCTransport, KernelManager):
    """jupyter_client's blocking kernel manager, on IPC: what nbval starts its kernels with."""


def execute(src: Path, dst: Path, parameters: dict | None = None) -> None:
    """Run `src` top to bottom in a fresh kernel started in its folder; write the executed copy to `dst`."""
    without_iri_grammar()
    import nbformat
    import papermill

    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    nb = papermill.execute_notebook(str(src), str(dst), parameters=parameters or {}, kernel_name=KERNEL,
                                    cwd=str(Path(src).parent), progress_bar=False,
                                    kernel_manager_class=IPCKernelManager)
    for key in ("input_path", "output_path"):  # papermill records them absolute: no machine path in a copy
        nb.metadata.papermill[key] = relative(nb.metadata.papermill[key])
    nbformat.write(nb, str(dst))


def main(argv: list[str]) -> None:
    """`python -m minitrain.lab.execute SRC DST [JSON_PARAMETERS]`; a bad MINITRAIN_LAB_OUT (the
    folder every notebook of `make lab` writes to) ends at once in one line, exit status 2."""
    try:
        lab_out_folder()
    except SettingError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(BAD_USAGE)
    execute(Path(argv[0]), Path(argv[1]), json.loads(argv[2]) if len(argv) > 2 else {})


if __name__ == "__main__":
    main(sys.argv[1:])
