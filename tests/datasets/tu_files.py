r"""Tiny datasets in the TUDataset text format, written by hand, and the path
of the shared real ones."""
import io
import zipfile
from pathlib import Path

# ../shared/data next to the project root (one level further up from a git worktree).
SHARED = next((p / "shared" / "data" for p in Path(__file__).resolve().parents[2].parents
               if (p / "shared" / "data").is_dir()), Path("../shared/data"))
SHARED_TU = SHARED / "tu"

# TOY: 3 graphs, 7 nodes (numbered from 1 across the dataset), graph labels -1 / 1.
#   graph 1: nodes 1-3, labels 1 2 1, edges 1-2 and 2-3 (both directions)
#   graph 2: nodes 4-5, labels 2 2, no edge
#   graph 3: nodes 6-7, labels 3 1, edge 6-7 both ways, a self-loop 6-6 and a
#            duplicate 6-7 (PyG drops the loop and merges the duplicate)
TOY = {
    "A": ["1, 2", "2, 1", "2, 3", "3, 2", "6, 7", "7, 6", "6, 6", "6, 7"],
    "edge_labels": ["0", "0", "1", "1", "2", "2", "0", "1"],
    "graph_indicator": ["1", "1", "1", "2", "2", "3", "3"],
    "graph_labels": ["-1", "1", "1"],
    "node_labels": ["1", "2", "1", "2", "2", "3", "1"],
    "node_attributes": ["0.5", "1.5", "-2.0", "3.25", "0.0", "1e-3", "7"],
}


def write_tu(folder, name="TOY", files=None, skip=()):
    r"""Writes ``files`` (part -> lines, default :data:`TOY`) as
    ``<folder>/<name>_<part>.txt``, leaving out the parts in ``skip``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for part, lines in (files or TOY).items():
        if part not in skip:
            (folder / f"{name}_{part}.txt").write_text("\n".join(lines) + "\n")
    return folder


def zip_folder(folder, name, extra=None):
    r"""The bytes of a zip holding every file of ``folder`` under ``<name>/``,
    as the collection publishes them, plus ``extra`` (member -> bytes)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for path in sorted(Path(folder).iterdir()):
            zf.writestr(f"{name}/{path.name}", path.read_bytes())
        for member, content in (extra or {}).items():
            zf.writestr(member, content)
    return buffer.getvalue()
