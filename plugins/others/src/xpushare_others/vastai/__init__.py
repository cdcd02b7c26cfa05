"""Vastai accelerators (VA1, VA16, ...): VAML, whole cards or single dies shared by slot."""
