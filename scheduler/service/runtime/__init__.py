"""The scheduler loop, split by owner of state.

``loop`` (the pass: drain inputs -> plan -> record -> actuate -> notify) composes:
``runs`` (the running attempts, drains and held starts; workers' messages), ``plan`` (what one
pass decided), ``settle`` (exits, time limits, culls, cancels and the policy's stops -> how
attempts end; pure), ``record`` (all of the loop's SQL, typed rows), ``launch`` (building
``TaskLaunch``), ``actuation`` (the workers that launch and stop), ``recovery`` (rebuilding
from the store, adoption), ``nodes`` (node marks and health) and ``observers``.

Only ``loop`` imports the others' whole set; none of them imports ``loop`` or the REST API.
"""
