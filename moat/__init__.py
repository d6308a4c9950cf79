"""Moat's public face for code outside the server: ``moat.adapters`` (what an adapter
package imports) and ``moat.testing`` (the conformance kit, a pytest plugin). Both sit above
every floor of the server (``schemas`` < ``store`` < ``workflows`` | ``activities`` <
``starter``) and only name what those floors define (``docs/adapters.md``)."""
