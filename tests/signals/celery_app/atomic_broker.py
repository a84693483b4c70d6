"""Kombu's filesystem transport writes a message file in place (open, then lock, then write),
so a worker polling the folder can take a file before its content is there and fail on
empty JSON (``JSONDecodeError``; the message is lost). The broker of these tests writes each
message under a name the reader does not look at and renames it into place when written."""

import os
import uuid
from time import monotonic

from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


def _put(self, queue, payload, **kwargs):
    name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
    final = os.path.join(self.data_folder_out, name)
    partial = final + ".partial"
    with open(partial, "wb") as file:
        file.write(str_to_bytes(dumps(payload)))
    os.replace(partial, final)


filesystem.Channel._put = _put
