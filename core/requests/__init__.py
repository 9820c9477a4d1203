"""What a user asks for, from the CLI or a form: the field table and field values -> config."""
