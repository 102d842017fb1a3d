"""The deterministic tick and the fixed-period loop that runs it: engine, compiled tick, stimulation, fatigue, sensors."""
