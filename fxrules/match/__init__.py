"""Matching: one rule's pattern at one anchor node, and the guards evaluated
on what the match bound.  Reads graphs, never changes them.
"""
