"""Safety functions of the loop, as on a patient: controller watchdog, GH stability monitor, ROM alarms, tick
stall. The rules form one table (:mod:`hil.safety.table`); importing the package enters the production rules
(:mod:`hil.safety.production`), so every reader of the table sees them."""
from hil.safety import production  # noqa: F401  (enters the production rules in the table)
