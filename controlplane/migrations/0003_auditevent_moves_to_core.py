# The audit log's model now belongs to the core app (core 0001); its table stays as it is.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("controlplane", "0002_initial"),
        ("core", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="AuditEvent")],
            database_operations=[],
        ),
    ]
