"""The package's plugin registration: ``koordfw replay colocation`` is a command (entry point group
``koordfw.commands``) and implements no hook, but every package under ``plugins/`` is also a ``koordfw``
plugin, so that ``koordfw plugins`` lists it with its distribution and version; loading it registers
nothing. The replay's policies are the other packages' plugins (batch_resource, be_suppress, eviction,
colocation_profile, load_aware, resource_profile)."""
