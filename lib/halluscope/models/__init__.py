"""How the pipeline talks to models: one interface, several backends."""
