r"""Traffic-speed forecasting on METR-LA and PEMS-BAY, one road sensor per client.

The files are those published with DCRNN (Li et al., "Diffusion Convolutional
Recurrent Neural Network: Data-Driven Traffic Forecasting", ICLR 2018):

* speeds ``metr-la.h5`` / ``pems-bay.h5``: a pandas DataFrame stored with
  ``DataFrame.to_hdf(path, key="df")``, a DatetimeIndex at 5-minute steps, one
  column per sensor id, speeds in mph, ``0`` for a missing reading (read
  into a :class:`SpeedTable`);
* processed windows ``train.npz``, ``val.npz``, ``test.npz`` written by
  DCRNN's ``generate_training_data.py``, which most users of the data hold:
  the series is rebuilt from them, checked window by window and dated
  (:func:`read_dcrnn_npz`), then windowed again like the speed file;
* for METR-LA, T-GCN's ``los_speed.csv`` (all 207 sensors over the first
  week, missing readings imputed; :func:`read_speed_csv`);
* sensor graphs ``adj_mx.pkl`` / ``adj_mx_bay.pkl``: a pickle of
  ``[sensor_ids, sensor_id_to_index, adj_mx]``, ``adj_mx`` a thresholded
  Gaussian kernel of road distances, diagonal 1. Both graphs ship with
  pyg_fedgraph as sparse edge lists with the sensor locations
  (:func:`bundled_sensor_graph`, ``data/NOTICE``), so only the speed file
  is needed for recorded speeds, and nothing for synthetic ones.

Panacea (Lin, Lan, He and Li, Sec. IV) treats every sensor as a client and the road
graph as the prior client graph. :class:`TrafficDataset` builds each client's
sliding windows on the fly from the :math:`(T, N)` series, so the heavily
overlapping windows are never copied (see :meth:`TrafficDataset.batch`).
:func:`synthetic_traffic` generates clearly labelled synthetic speeds on a
real road graph for offline runs.

A dataset keeps the sensors of its files (or a chosen subset,
:func:`choose_sensors`) and the rows and columns of the full road graph for
them (:func:`restrict_adjacency`, :meth:`SensorGraph.subgraph`).

The package holds one module per concern: :mod:`~.io` (files),
:mod:`~.npz` (DCRNN's processed windows), :mod:`~.dataset`
(:class:`TrafficDataset`), :mod:`~.dcrnn` (METR-LA, PEMS-BAY and their
registered builders) and :mod:`~.synthetic`.

**Security.** No file handed to these loaders can run code. The graph
pickle is read with a restricted unpickler that only builds lists, dicts,
strings, numbers and numpy arrays (:func:`load_sensor_graph`). The speed
file is read with h5py, numeric datasets only (:func:`read_speed_h5`): pandas
and PyTables are never used to read it, because they unpickle object columns
and node attributes, so that a crafted ``.h5`` file would run code when
opened with ``pandas.read_hdf``. The npz files are read with
``numpy.load(allow_pickle=False)``, a CSV with :func:`numpy.loadtxt` (numbers
only). Malformed files of any kind raise a
one-line :class:`ValueError` naming the file. The bundled graphs are checked
against their sha256 and read with ``numpy.load(allow_pickle=False)``.
"""
from pyg_fedgraph.datasets.traffic.dataset import TrafficDataset, dcrnn_split_sizes
from pyg_fedgraph.datasets.traffic.dcrnn import (
    METRLA,
    PEMSBAY,
    choose_sensors,
    metr_la,
    pems_bay,
)
from pyg_fedgraph.datasets.traffic.io import (
    RemoteFile,
    SensorGraph,
    SpeedTable,
    adjacency_to_edges,
    bundled_sensor_graph,
    download_file,
    load_sensor_graph,
    read_speed_csv,
    read_speed_h5,
    restrict_adjacency,
    verify_sha256,
)
from pyg_fedgraph.datasets.traffic.npz import (
    concat_tables,
    find_npz_folders,
    find_sensor_ids,
    read_dcrnn_npz,
    read_sensor_ids,
)
from pyg_fedgraph.datasets.traffic.synthetic import synthetic_traffic, synthetic_windows

__all__ = [
    "TrafficDataset",
    "METRLA",
    "PEMSBAY",
    "RemoteFile",
    "synthetic_traffic",
    "synthetic_windows",
    "load_sensor_graph",
    "adjacency_to_edges",
    "read_speed_h5",
    "read_speed_csv",
    "SpeedTable",
    "SensorGraph",
    "bundled_sensor_graph",
    "dcrnn_split_sizes",
    "verify_sha256",
    "download_file",
    "metr_la",
    "pems_bay",
    "read_dcrnn_npz",
    "read_sensor_ids",
    "find_sensor_ids",
    "find_npz_folders",
    "concat_tables",
    "restrict_adjacency",
    "choose_sensors",
]
