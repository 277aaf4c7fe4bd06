"""koordfw's built-in plugins. Each is loaded through the ``koordfw`` entry-point group like any
third-party plugin and can be disabled (``--disable NAME`` or ``disable:`` in the profile)."""
