"""``tenure dashboard``: server-rendered pages over tenure's public views, for operators.

One page per area (overview, heartbeat, replicas, claims, tasks, batches, schedules), each
also as JSON at the same path. ``data`` gathers what a page shows, one function per area
in one read-only snapshot; ``charts`` draws its timelines and rates as inline SVG;
``app`` is the Starlette application (pages, sign-in, the operator actions behind a token
with CSRF protection); ``security`` keeps sign-in and actions to the operator (sessions
that end, same-origin posts, throttled sign-in, the Host check, the security headers);
``server`` runs it under uvicorn, on loopback unless told otherwise. The dashboard reads only views
and calls only public functions, so a role that is a member of ``tenure_worker`` is all
it needs. It imports the core and nothing above it.
"""

from tenure.dashboard.app import ACTIONS, Dashboard, Settings
from tenure.dashboard.server import DashboardServer, is_loopback, serve

__all__ = ["ACTIONS", "Dashboard", "DashboardServer", "Settings", "is_loopback", "serve"]
