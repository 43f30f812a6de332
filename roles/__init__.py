"""Roles: thin ``@deploy`` functions that call pyinfra operations with data ``rocmfleet`` computed."""
