"""Operations for secrets: files whose content never appears in pyinfra's output or diffs."""

from __future__ import annotations

import hashlib
from io import BytesIO

from pyinfra.api.command import FileUploadCommand
from pyinfra.api.operation import operation
from pyinfra.context import host
from pyinfra.facts.files import Sha256File
from pyinfra.operations import files

from rocmfleet.config.vault import Secret
from rocmfleet.operations import Commands


@operation()
def secret_file(path: str, content: Secret, user: str = "root", group: str = "root", mode: str = "600") -> Commands:
    """
    Write a file holding secrets: compared by SHA-256, uploaded only when it differs.

    + path: file on the host; keep it in a directory of mode 0700 (the upload lands before the
      mode is set)
    + content: the whole file, as a :class:`rocmfleet.config.vault.Secret` (never printed)
    + user, group, mode: ownership and mode (default root, root, 0600)

    Unlike ``files.put``/``files.template`` this never shows the content, also not with
    ``--diff`` or ``-vvv``.

    **Example:**

    .. code:: python

        secrets.secret_file(name="Write HF token", path="/etc/rocmfleet/vllm/a.secrets", content=secret)
    """
    data = content.reveal().encode()
    if host.get_fact(Sha256File, path=path) != hashlib.sha256(data).hexdigest():
        yield FileUploadCommand(BytesIO(data), path)
    yield from files.file._inner(path=path, user=user, group=group, mode=mode)
