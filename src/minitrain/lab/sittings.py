def sitting_note(*results: dict) -> str:
    """'' when every result comes from one sitting, else a sentence naming the sittings (lead writes it)."""
    return ""
