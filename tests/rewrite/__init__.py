"""What a replacement does to the graph: aliasing, aten spellings, the commit."""
