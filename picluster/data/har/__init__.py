"""Human Activity Recognition data: UCI HAR windows, from the UCI zip or rebuilt offline from HAPT.

Training code needs one call: ``load_har()`` (or ``load_har(har_dir(inventory))`` on a cluster)
returns x/y/subject arrays for the train, validation and test splits, whichever source prepared
them (see dataset.py).
"""

from picluster.data.har.dataset import HarData, har_dir, load_har
from picluster.data.har.spec import CHANNELS, CLASSES

__all__ = ["CHANNELS", "CLASSES", "HarData", "har_dir", "load_har"]
