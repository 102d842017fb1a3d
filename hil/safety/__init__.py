"""Safety functions of the loop, as on a patient: controller watchdog, GH stability monitor, ROM alarms."""
