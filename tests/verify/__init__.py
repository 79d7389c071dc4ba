"""`fxrules.verify` and `fxrules prove`."""
