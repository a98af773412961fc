"""HalluLens (Bang et al., 2025): PreciseWikiQA, LongWiki and NonExistentRefusal."""
