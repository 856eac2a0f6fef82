"""Where model replies come from: Claude (`claude/`), the scripted model, and prices."""
