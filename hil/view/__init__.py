"""The live view and replay view of a run: one web page served on localhost.

- :mod:`hil.view.block`: the status block the real-time process writes (seqlock) and its tick listener;
- :mod:`hil.view.scene`: what the page draws, as JSON-ready samples (the arm's points from the model's
  kinematics, the GH force direction in the glenoid, angles, stimulation, timing, alarms);
- :mod:`hil.view.server`: the HTTP server (standard library, server-sent events), its process for
  ``hil run --view`` / ``hil serve --view`` and the replay server of ``hil view``;
- ``static/``: the page (HTML, CSS and JavaScript written for it; nothing fetched from elsewhere).
"""
