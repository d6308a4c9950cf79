"""``python -m starter.gateway.console``: write the asset lock (``static/assets.lock``) from
the files of ``static/``, after changing one."""

from starter.gateway.console.assets import main

raise SystemExit(main())
