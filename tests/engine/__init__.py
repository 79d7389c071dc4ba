"""The driver, `apply`: passes, reports, all or nothing, narrowing, dynamic shapes."""
