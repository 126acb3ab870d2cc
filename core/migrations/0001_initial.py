# The audit log moved here from the controlplane app: this takes over its model as it stands,
# table included, without touching the database (controlplane 0003 lets go of it).

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("controlplane", "0002_initial"),
        ("tenants", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="AuditEvent",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("created_at", models.DateTimeField(auto_now_add=True, db_index=True)),
                        ("actor_name", models.CharField(max_length=150)),
                        ("action", models.CharField(max_length=64)),
                        ("target_type", models.CharField(max_length=64)),
                        ("target_id", models.CharField(max_length=64)),
                        ("reason", models.TextField(blank=True)),
                        ("data", models.JSONField(blank=True, default=dict)),
                        ("actor", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="+", to=settings.AUTH_USER_MODEL)),
                        ("tenant", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="+", to="tenants.tenant")),
                    ],
                    options={
                        "ordering": ["-created_at", "-id"],
                        "db_table": "controlplane_auditevent",
                        "indexes": [models.Index(fields=["target_type", "target_id"], name="controlplan_target__6615d6_idx")],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
