"""Loading a DCP checkpoint without running code from it.

torch.distributed.checkpoint unpickles a checkpoint's ``.metadata`` file with plain ``pickle``,
and its default load planner reads every non-tensor entry (an optimizer's ``param_groups``, step
counts) with ``torch.load(weights_only=False)``. Whoever can write the checkpoint directory could
then run code as the worker at its next restore. The reader and planner here load the same files
but refuse anything other than data:

* the metadata through an unpickler that resolves only DCP's own metadata classes, torch dtypes,
  sizes and layouts, and paths: what DCP writes there (checked against the files it writes, in
  the tests); anything else fails the load with the name it asked for;
* non-tensor entries with ``torch.load(weights_only=True)``: tensors and plain containers.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import ReadItem

#: modules whose classes the metadata may hold (DCP's own data classes and enums)
_METADATA_MODULE = "torch.distributed.checkpoint.metadata"
#: other names DCP's metadata pickles refer to
_ALLOWED = {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "Path"),
    ("collections", "OrderedDict"),
}


class UnsafeCheckpoint(pickle.UnpicklingError):
    """A checkpoint file asked for something other than data."""


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == _METADATA_MODULE or (module, name) in _ALLOWED:
            found = super().find_class(module, name)
            if module != _METADATA_MODULE or isinstance(found, type):
                return found
        elif module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise UnsafeCheckpoint(
            f"the checkpoint's DCP metadata refers to {module}.{name}, which is not a DCP "
            "metadata type: refused (a tampered checkpoint could run code on load)"
        )


def load_metadata(stream: io.BufferedIOBase | Any) -> Metadata:
    """Unpickle DCP metadata, refusing anything but its own types."""
    metadata = _MetadataUnpickler(stream).load()
    if not isinstance(metadata, Metadata):
        raise UnsafeCheckpoint(f"DCP metadata is a {type(metadata).__name__}, not Metadata")
    return metadata


class SafeFileSystemReader(FileSystemReader):
    """``FileSystemReader`` whose metadata is read by :func:`load_metadata`."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        path = self._get_metadata_path(kwargs.get("rank"))
        with self.fs.create_stream(path, "rb") as stream:
            metadata = load_metadata(stream)
        storage = getattr(metadata, "storage_meta", None) or StorageMeta()
        storage.load_id = self.load_id
        metadata.storage_meta = storage
        return metadata


class SafeLoadPlanner(DefaultLoadPlanner):
    """``DefaultLoadPlanner`` that reads non-tensor entries with ``weights_only=True``."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        try:
            obj = torch.load(value, weights_only=True)
        except pickle.UnpicklingError as err:
            raise UnsafeCheckpoint(
                f"the checkpoint's entry {read_item.dest_index.fqn!r} is not plain data: "
                f"refused ({str(err).splitlines()[0]})"
            ) from None
        # as the base class stores it (which reads the bytes with weights_only=False)
        fqn = read_item.dest_index.fqn
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], obj)
        else:
            self.state_dict[fqn] = obj
