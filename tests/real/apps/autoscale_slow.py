"""User code for the autoscaling real test and benchmark: a slow async handler.

Each request holds its replica for `DELAY_S`, so a few concurrent clients
keep several requests ongoing per replica, which is what the autoscaler
scales on. The tests copy this file into a tmp git repository (user code
ships from the commit), so it imports only what a user's code could.
"""

from __future__ import annotations

import asyncio
import os

DELAY_S = 0.05


async def slow(request) -> dict:
    await asyncio.sleep(DELAY_S)
    return {"pid": os.getpid()}
