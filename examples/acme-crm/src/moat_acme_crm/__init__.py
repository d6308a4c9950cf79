"""``moat-acme-crm``: an example adapter package for Moat. It adds ``acme.create_ticket``,
a ticket in Acme's internal CRM, made exactly once by reconcile: each ticket carries the
execution's downstream key in its ``external_ref`` field, and before any repeated attempt
the adapter looks the key up (``GET /tickets?external_ref=…``)."""
