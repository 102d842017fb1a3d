"""The processes of ``hil run`` / ``hil serve``: building a run, the supervisor, the real-time process."""
