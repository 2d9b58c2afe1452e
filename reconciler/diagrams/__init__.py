"""Spec 07: the records' tables (transcribed independently of `fsm`), rendering the machines,
and checking the rendered files against the tables."""
