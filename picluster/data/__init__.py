"""Data sets the jobs train on, prepared once on the coordinator or the share: har/ (UCI HAR windows)."""
