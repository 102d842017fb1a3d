"""``hil sweep``: sweep files, the Dask runner and workers, and the sweep report."""
